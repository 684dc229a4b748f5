package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/version"
)

// containerdRuntime is --runtime containerd: per node, Debian's containerd (with runc)
// and the real kubelet (KubeVersion), both in the node's netns, each with its own
// sockets, root and state dirs, cgroup parent and CNI dirs; the locally built images
// (internal/images, tagged with this binary's version) imported into each containerd.
type containerdRuntime struct{}

const containerdFix = "install containerd and runc (make setup)"

func (containerdRuntime) Tools() []cni.Tool {
	return []cni.Tool{
		{Path: "containerd", Fix: containerdFix},
		{Path: "containerd-shim-runc-v2", Fix: containerdFix},
		{Path: "runc", Fix: containerdFix},
		{Path: "ctr", Fix: containerdFix},
		{Path: "unshare", Fix: "install util-linux (make setup)"}, // withHostname
		{Path: "hostname", Fix: "install hostname (make setup)"},
		{Path: loopbackPlugin, Fix: cni.ReferencePluginFix},
		{Path: filepath.Join(KubeBinDir(), "kubelet"), Fix: "build kubelet " + KubeVersion + " with: make setup"},
	}
}

// loopbackPlugin is Debian's reference loopback plugin, which containerd 1.6 calls for
// every pod whatever the configured network is; Prepare links it into each node's CNI
// bin dir.
var loopbackPlugin = filepath.Join(cni.ReferencePluginDir, "loopback")

func (containerdRuntime) Describe(nodes int) string {
	return fmt.Sprintf("%d kubelets (%s) with containerd", nodes, KubeVersion)
}

// Prepare checks the images, records the machine's sysctls, and writes each node's
// containerd and kubelet configuration, directories and cgroups.
func (containerdRuntime) Prepare(paths labplan.Paths, plan labplan.Plan) error {
	for _, image := range images.Names {
		if a := images.Archive(cni.ToolCache(), version.Version, image); !exists(a) {
			return fmt.Errorf("image %s: archive %s not found; build the images of this version with: make images (or myelin images build)",
				images.Ref(image, version.Version), a)
		}
	}
	if err := saveSysctls(paths.Sysctls()); err != nil {
		return err
	}
	for dir, marker := range map[string]string{
		labplan.KubeletSharedDir: paths.KubeletSharedDirCreated(),
		labplan.CNICacheDir:      paths.CNICacheDirCreated(),
	} {
		if !exists(dir) {
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				return err
			}
		}
	}
	for _, n := range plan.Nodes {
		if err := prepareNode(paths, plan, n); err != nil {
			return fmt.Errorf("prepare node %s: %w", n.Name, err)
		}
	}
	return sharedMount(paths, paths.NodesDir())
}

// sharedMount makes dir, in the lab directory, a shared mount of its own (a bind
// mount on itself) unless it is a mount point already (lab up again). lab down
// unmounts it with the lab's other mounts (labMounts).
func sharedMount(paths labplan.Paths, dir string) error {
	if !slices.Contains(labMounts(paths), dir) {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s on itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", dir, err)
	}
	return nil
}

func prepareNode(paths labplan.Paths, plan labplan.Plan, n labplan.Node) error {
	for _, dir := range []string{paths.ContainerdRoot(n.Name), paths.ContainerdState(n.Name), paths.KubeletDir(n.Name),
		paths.PodLogsDir(n.Name), paths.CNIBinDir(n.Name), paths.CNIConfDir(n.Name)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, name := range append([]string{filepath.Base(loopbackPlugin)}, referencePlugins(plan)...) {
		err := os.Symlink(filepath.Join(cni.ReferencePluginDir, name), filepath.Join(paths.CNIBinDir(n.Name), name))
		if err != nil && !os.IsExist(err) {
			return err
		}
	}
	pause := images.Ref(images.Pause, version.Version)
	if err := os.WriteFile(paths.ContainerdConfig(n.Name), []byte(labplan.ContainerdConfig(paths, n.Name, pause)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(paths.KubeletConfig(n.Name), []byte(labplan.KubeletConfig(paths, n, plan.Addressing.DNSServiceIP())), 0o644); err != nil {
		return err
	}
	return createCgroups(labplan.CgroupRoot(n.Name))
}

// referencePlugins are the reference plugins the lab's CNI flavour configures (bridge,
// flannel); containerd finds plugins only in the node's CNI bin dir, so Prepare links
// them there, next to loopback. The lab kubelet also searches cni.ReferencePluginDir.
func referencePlugins(p labplan.Plan) []string {
	return cni.ReferencePlugins(FlavourOf(p.Options.CNI).Tools(""))
}

// NodeProcesses are, per node, containerd and the kubelet, then, for a flavour the lab
// configures with reference plugins, its node network (`myelin lab node-network`: the
// conflist and, for bridge, the routes), which the lab kubelet runs itself on
// --runtime lab. Without it the node never gets a CNI configuration and stays NotReady.
func (containerdRuntime) NodeProcesses(p labplan.Plan, paths labplan.Paths, self, kubeBin string) []labplan.Process {
	var procs []labplan.Process
	for _, n := range p.Nodes {
		procs = append(procs,
			labplan.Process{
				Name: containerdProcess(n.Name),
				Argv: withHostname(n.Name, labplan.InNS(n.Name, "containerd", "--config", paths.ContainerdConfig(n.Name))),
			},
			labplan.Process{
				Name:   "kubelet-" + n.Name,
				Argv:   labplan.InNS(n.Name, append([]string{filepath.Join(kubeBin, "kubelet")}, labplan.KubeletArgs(paths, n)...)...),
				Health: fmt.Sprintf("http://%s:%d/healthz", n.IP, labplan.KubeletHealthzPort),
			})
		if len(referencePlugins(p)) > 0 {
			procs = append(procs, labplan.Process{
				Name: NodeNetworkProcess(n.Name),
				Argv: labplan.InNS(n.Name, self, "lab", "node-network", "--node", n.Name, "--dir", paths.Dir),
			})
		}
	}
	return procs
}

// withHostname runs argv in a UTS namespace of its own whose hostname is node, so that
// what containerd starts in the node's namespaces, hostNetwork pods included, sees the
// node's name as its hostname, as on a machine of its own (the upstream Services tests
// ask hostNetwork backends for theirs and expect the node's name; all nodes shared the
// machine's). Every step execs in place: the supervised process stays the same PID.
func withHostname(node string, argv []string) []string {
	return append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, node}, argv...)
}

// NodeNetworkProcess names the supervised `myelin lab node-network` of a node (and its log).
func NodeNetworkProcess(node string) string { return "network-" + node }

const containerdPrefix = "containerd-"

func containerdProcess(node string) string { return containerdPrefix + node }

// Started imports the images into a node's containerd once it runs, and puts the
// machine's sysctls back once a kubelet has started (it sets some at start).
func (containerdRuntime) Started(ctx context.Context, paths labplan.Paths, proc labplan.Process) error {
	switch {
	case strings.HasPrefix(proc.Name, containerdPrefix):
		return importImages(ctx, paths.ContainerdSocket(strings.TrimPrefix(proc.Name, containerdPrefix)))
	case strings.HasPrefix(proc.Name, "kubelet-"):
		return restoreSysctls(paths.Sysctls())
	}
	return nil
}

// Guard puts the recorded sysctls back whenever they change: a kubelet the supervisor
// restarts sets them again.
func (containerdRuntime) Guard(ctx context.Context, paths labplan.Paths) {
	for {
		if err := restoreSysctls(paths.Sysctls()); err != nil {
			fmt.Fprintf(os.Stderr, "supervisor: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// importImages waits for a containerd to answer, then imports every image into its
// k8s.io namespace (the CRI's).
func importImages(ctx context.Context, sock string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for exec.CommandContext(ctx, "ctr", "-a", sock, "version").Run() != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd at %s did not answer: %w", sock, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	for _, image := range images.Names {
		if err := importArchive(ctx, sock, images.Archive(cni.ToolCache(), version.Version, image)); err != nil {
			return err
		}
	}
	return nil
}

// importArchive imports one image archive into the k8s.io namespace of the containerd at sock.
func importArchive(ctx context.Context, sock, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import image %s into %s: %v: %s", archive, sock, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
