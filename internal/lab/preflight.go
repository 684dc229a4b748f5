package lab

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

var errNotRoot = errors.New("myelin lab up must run as root: it creates network namespaces and links; run it with sudo")

// preflight checks everything `lab up` needs before it changes anything, and returns
// one error naming the first problem and its fix (Up checks for root, errNotRoot,
// before it takes the lab's lock).
func preflight(paths labplan.Paths, plan labplan.Plan) error {
	if err := checkTools(plan); err != nil {
		return err
	}
	if err := CheckStale(paths); err != nil {
		return err
	}
	if err := checkKernel(); err != nil {
		return err
	}
	return checkPorts(plan.Addressing.ControlPlaneIP(),
		[]int{labplan.EtcdClientPort, labplan.APIServerPort, labplan.ControllerManagerPort, labplan.SchedulerPort})
}

func checkTools(plan labplan.Plan) error {
	tools := []cni.Tool{
		{Path: "ip", Fix: "install iproute2 (make setup)"},
		{Path: "nsenter", Fix: "install util-linux (make setup)"},
		{Path: "sysctl", Fix: "install procps (make setup)"},
		{Path: EtcdBin(), Fix: "build etcd " + EtcdVersion + " with: make setup"},
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		tools = append(tools, cni.Tool{Path: filepath.Join(KubeBinDir(), b), Fix: "build Kubernetes " + KubeVersion + " with: make setup"})
	}
	self, _ := os.Executable()
	tools = append(tools, FlavourOf(plan.Options.CNI).Tools(self)...)
	tools = append(tools, RuntimeOf(plan.Options.Runtime).Tools()...)
	for _, t := range tools {
		if _, err := exec.LookPath(t.Path); err != nil {
			return fmt.Errorf("%s not found: %s", t.Path, t.Fix)
		}
	}
	return nil
}

// CheckStale fails, naming what it found, when a lab's directory, network namespaces
// or root links are on the machine with no lab running: lab up refuses to build over
// them, and tests check for them before they start. A directory at paths that holds
// files but no lab marker is not a stale lab: it is refused as a --dir lab up cannot
// use. An empty one is fine (lab up marks it and builds there).
func CheckStale(paths labplan.Paths) error {
	var found []string
	switch labDirState(paths) {
	case dirForeign:
		return fmt.Errorf("--dir %s: the directory exists, holds files and is not a lab directory (no %s marker); "+
			"lab up builds a lab only in a new or empty directory: pass another --dir (if it is a lab's made before lab up "+
			"wrote the marker: touch %s, then myelin lab down --dir %s)", paths.Dir, labplan.MarkerFile, paths.Marker(), paths.Dir)
	case dirMarked:
		found = append(found, paths.Dir)
	}
	found = append(found, LeftoverNetNS()...)
	found = append(found, leftoverRootLinks()...)
	if len(found) == 0 {
		return nil
	}
	if len(found) > 4 {
		found = append(found[:4], fmt.Sprintf("and %d more", len(found)-4))
	}
	return fmt.Errorf("a stale lab is in the way (%s), left by a crashed or interrupted run; remove it with: myelin lab down --dir %s",
		strings.Join(found, ", "), paths.Dir)
}

// checkKernel builds a bridge and a veth pair in a throwaway netns.
func checkKernel() error {
	const ns = "myelin-probe"
	defer func() { _ = run("ip", "netns", "del", ns) }()
	steps := []struct {
		argv    []string
		feature string
	}{
		{[]string{"ip", "netns", "add", ns}, "network namespaces (CONFIG_NET_NS)"},
		{[]string{"ip", "-n", ns, "link", "add", "probe-br", "type", "bridge"}, "bridges (CONFIG_BRIDGE)"},
		{[]string{"ip", "-n", ns, "link", "add", "probe-a", "type", "veth", "peer", "name", "probe-b"}, "veth (CONFIG_VETH)"},
	}
	for _, s := range steps {
		if err := run(s.argv...); err != nil {
			return fmt.Errorf("this kernel lacks %s, which the lab needs (%v); use a kernel that has it", s.feature, err)
		}
	}
	return nil
}

// checkPorts fails when a TCP listener already holds one of the ports on the
// control-plane address or on the wildcard address.
func checkPorts(ip netip.Addr, ports []int) error {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		listeners := parseListeners(bufio.NewScanner(f))
		f.Close()
		for _, l := range listeners {
			for _, p := range ports {
				if l.port == p && (l.addr.IsUnspecified() || l.addr == ip) {
					return fmt.Errorf("port %d is already in use on %v%s; the lab's control plane needs it: stop that process and run myelin lab up again",
						p, l.addr, owner(l.inode))
				}
			}
		}
	}
	return nil
}

type listener struct {
	addr  netip.Addr
	port  int
	inode string
}

// parseListeners reads the LISTEN sockets of a /proc/net/tcp{,6} table.
func parseListeners(sc *bufio.Scanner) []listener {
	var out []listener
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" { // 0A = TCP_LISTEN
			continue
		}
		hostPort := strings.Split(f[1], ":")
		if len(hostPort) != 2 {
			continue
		}
		port, err := strconv.ParseUint(hostPort[1], 16, 16)
		if err != nil {
			continue
		}
		addr, ok := parseProcAddr(hostPort[0])
		if !ok {
			continue
		}
		out = append(out, listener{addr: addr, port: int(port), inode: f[9]})
	}
	return out
}

// parseProcAddr decodes the kernel's hex address: 32-bit words in host (little-endian) order.
func parseProcAddr(h string) (netip.Addr, bool) {
	var b []byte
	for i := 0; i+8 <= len(h); i += 8 {
		w, err := strconv.ParseUint(h[i:i+8], 16, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		b = append(b, byte(w), byte(w>>8), byte(w>>16), byte(w>>24))
	}
	a, ok := netip.AddrFromSlice(b)
	return a.Unmap(), ok
}

// owner names the process holding a socket inode, as " (pid N, name)" or "".
func owner(inode string) string {
	target := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); l == target {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				return fmt.Sprintf(" (pid %s, %s)", p.Name(), strings.TrimSpace(string(comm)))
			}
		}
	}
	return ""
}
