package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/lab/cni/bridge"
	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// What --runtime containerd leaves outside the lab directory, shared by all nodes.
const (
	shimSocketDir    = "/run/containerd/s"   // containerd 1.6 puts every shim's socket here
	containerLogsDir = "/var/log/containers" // the kubelet links each container's log here
)

// podDeleteGrace is the pods' grace period in lab down: the lab is going away, and a
// shell as PID 1 ignores SIGTERM.
var podDeleteGrace int64 = 2

// deletePods deletes every pod while the kubelets still run, so their CNI DEL gives
// the addresses back: workloads first, then what DaemonSets run (a CNI agent last).
func deletePods(paths labplan.Paths, timeout time.Duration) error {
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, daemons := range []bool{false, true} {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		left := 0
		for _, p := range pods.Items {
			if ownedByDaemonSet(p.OwnerReferences) != daemons {
				continue
			}
			left++
			_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &podDeleteGrace})
		}
		for left > 0 && ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				break
			}
			left = 0
			for _, p := range pods.Items {
				if ownedByDaemonSet(p.OwnerReferences) == daemons {
					left++
				}
			}
		}
	}
	return ctx.Err()
}

func ownedByDaemonSet(refs []metav1.OwnerReference) bool {
	for _, r := range refs {
		if r.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// shimSockets lists the shim sockets of the lab's containerds: each task's state
// records its shim's address (unix:///run/containerd/s/<hash>).
func shimSockets(paths labplan.Paths) []string {
	files, _ := filepath.Glob(filepath.Join(paths.Dir, "nodes", "*", "containerd", "state", "io.containerd.runtime.v2.task", "*", "*", "address"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sock := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
		if filepath.Dir(sock) == shimSocketDir {
			out = append(out, sock)
		}
	}
	return out
}

// labMounts lists the mount points under the lab directory (the kubelet's bind mount
// of its root dir, per-pod tmpfs and projected volumes, pod netns, overlay rootfs),
// deepest first.
func labMounts(paths labplan.Paths) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := strings.ReplaceAll(fields[4], `\040`, " ")
		if mp == paths.Dir || strings.HasPrefix(mp, paths.Dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// leftoverContainerLogs lists /var/log/containers links into the lab directory.
func leftoverContainerLogs(paths labplan.Paths) []string {
	entries, _ := os.ReadDir(containerLogsDir)
	var out []string
	for _, e := range entries {
		link := filepath.Join(containerLogsDir, e.Name())
		if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, paths.Dir+"/") {
			out = append(out, link)
		}
	}
	return out
}

// downRuntime removes what the containerd runtime leaves outside the lab's processes
// and namespaces, once they are gone: mounts, shim sockets, container log links,
// cgroups, and it puts the machine's sysctls back. What only the lab directory tells
// (mounts in it, its records of sysctls and created directories) it acts on only when
// own, the directory being a lab's. It returns what it could not remove.
func downRuntime(paths labplan.Paths, own bool, note func(string, ...any)) []string {
	var problems []string
	if n := killCgroupProcesses(); n > 0 {
		note("killed %d leftover container processes", n)
	}
	if own {
		problems = append(problems, downRuntimeDir(paths, note)...)
	}
	// Empty once the lab's shims are gone; a running containerd's would not be.
	for _, dir := range []string{shimSocketDir, filepath.Dir(shimSocketDir)} {
		_ = syscall.Rmdir(dir)
	}
	problems = append(problems, removeCNIResults(paths, own, note)...)
	for _, cg := range leftoverCgroups() {
		if err := removeCgroupRetrying(cg); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		note("removed cgroup %s", cg)
	}
	return problems
}

// downRuntimeDir is the part of downRuntime that the lab directory leads to.
func downRuntimeDir(paths labplan.Paths, note func(string, ...any)) []string {
	var problems []string
	if err := restoreSysctls(paths.Sysctls()); err != nil {
		problems = append(problems, err.Error())
	}
	for _, mp := range labMounts(paths) {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			problems = append(problems, fmt.Sprintf("unmount %s: %v", mp, err))
		}
	}
	for _, f := range append(shimSockets(paths), leftoverContainerLogs(paths)...) {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			problems = append(problems, err.Error())
			continue
		}
		note("removed %s", f)
	}
	if exists(paths.KubeletSharedDirCreated()) && exists(labplan.KubeletSharedDir) {
		if err := os.RemoveAll(labplan.KubeletSharedDir); err != nil {
			problems = append(problems, err.Error())
		} else {
			note("removed %s (the kubelets' device-plugin dir)", labplan.KubeletSharedDir)
		}
	}
	return problems
}

// removeCgroupRetrying gives the kernel a moment to release killed tasks.
func removeCgroupRetrying(dir string) error {
	var err error
	for range 50 {
		if err = removeCgroup(dir); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// labNetworks are the CNI network names of the lab's flavours.
var labNetworks = []string{"myelin", bridge.NetworkName, flannel.NetworkName}

// cniResult is a file name of libcni's result cache: <network>-<sandbox id>-<ifname>.
var cniResult = regexp.MustCompile(`^(.+)-([0-9a-f]{64})-([^-]+)$`)

// LeftoverCNIResults lists containerd's cached CNI results of the lab's pods: those
// of the lab's networks, and the loopback results of the same sandboxes.
func LeftoverCNIResults() []string {
	return cniResultsIn(filepath.Join(labplan.CNICacheDir, "results"))
}

// cniResultsIn is LeftoverCNIResults in the results directory dir.
func cniResultsIn(dir string) []string {
	entries, _ := os.ReadDir(dir)
	sandboxes := map[string]bool{}
	for _, e := range entries {
		if m := cniResult.FindStringSubmatch(e.Name()); m != nil && slices.Contains(labNetworks, m[1]) {
			sandboxes[m[2]] = true
		}
	}
	var out []string
	for _, e := range entries {
		if m := cniResult.FindStringSubmatch(e.Name()); m != nil && sandboxes[m[2]] {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// labSandboxes are the pod sandboxes the lab's containerds made (their CRI sandbox
// directories under each node's containerd root in the lab directory).
func labSandboxes(paths labplan.Paths) map[string]bool {
	out := map[string]bool{}
	nodes, _ := os.ReadDir(filepath.Join(paths.Dir, "nodes"))
	for _, n := range nodes {
		ids, _ := os.ReadDir(filepath.Join(paths.ContainerdRoot(n.Name()), "io.containerd.grpc.v1.cri", "sandboxes"))
		for _, id := range ids {
			out[id.Name()] = true
		}
	}
	return out
}

// ownCNIResults keeps of results (cached result files) those of sandboxes: a machine
// whose own containerd runs pods on networks named as the lab's (flannel's cbr0) keeps
// their results.
func ownCNIResults(results []string, sandboxes map[string]bool) []string {
	var out []string
	for _, f := range results {
		if m := cniResult.FindStringSubmatch(filepath.Base(f)); m != nil && sandboxes[m[2]] {
			out = append(out, f)
		}
	}
	return out
}

// removeCNIResults removes the lab's cached CNI results (those of the sandboxes its
// containerds made), or the whole cache when the lab created it (as its own directory,
// own, records).
func removeCNIResults(paths labplan.Paths, own bool, note func(string, ...any)) []string {
	if own && exists(paths.CNICacheDirCreated()) && exists(labplan.CNICacheDir) {
		if err := os.RemoveAll(labplan.CNICacheDir); err != nil {
			return []string{err.Error()}
		}
		note("removed %s (containerd's CNI result cache)", labplan.CNICacheDir)
		return nil
	}
	if !own {
		return nil
	}
	var problems []string
	results := ownCNIResults(LeftoverCNIResults(), labSandboxes(paths))
	for _, f := range results {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			problems = append(problems, err.Error())
		}
	}
	if len(results) > 0 {
		note("removed %d cached CNI results of lab pods from %s", len(results), labplan.CNICacheDir)
	}
	return problems
}
