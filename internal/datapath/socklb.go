package datapath

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// sockObjectsLoaded are the socket-LB programs (bpf/sock.c) and the map only they
// use; the service maps they read are the tc datapath's, opened by pin.
type sockObjectsLoaded struct {
	Connect4     *ebpf.Program `ebpf:"myelin_sock_connect4"`
	Sendmsg4     *ebpf.Program `ebpf:"myelin_sock_sendmsg4"`
	Recvmsg4     *ebpf.Program `ebpf:"myelin_sock_recvmsg4"`
	Getpeername4 *ebpf.Program `ebpf:"myelin_sock_getpeername4"`
	Rev          *ebpf.Map     `ebpf:"myelin_lb_sock_rev"`
	Peer         *ebpf.Map     `ebpf:"myelin_lb_sock_peer"`
}

func (o *sockObjectsLoaded) close() {
	for _, c := range []interface{ Close() error }{o.Connect4, o.Sendmsg4, o.Recvmsg4, o.Getpeername4, o.Rev, o.Peer} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// sockHook is one socket-LB program's attachment: its cgroup hook and the name of
// its pinned link under <PinDir>/links.
type sockHook struct {
	pin    string
	attach ebpf.AttachType
	prog   func(*sockObjectsLoaded) *ebpf.Program
}

var sockHooks = []sockHook{
	{"sock-connect4", ebpf.AttachCGroupInet4Connect, func(o *sockObjectsLoaded) *ebpf.Program { return o.Connect4 }},
	{"sock-sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, func(o *sockObjectsLoaded) *ebpf.Program { return o.Sendmsg4 }},
	{"sock-recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, func(o *sockObjectsLoaded) *ebpf.Program { return o.Recvmsg4 }},
	{"sock-getpeername4", ebpf.AttachCgroupInet4GetPeername, func(o *sockObjectsLoaded) *ebpf.Program { return o.Getpeername4 }},
}

// AttachSocketLB attaches the socket-level load balancer (bpf-lb-sock) to the
// cgroup v2 directory cgroup: sockets of every process in it (and below) that
// connect or send to a Service frontend are translated to a backend at connect()
// or sendmsg(), and getpeername() and received datagrams show the frontend again.
// The links are pinned at <PinDir>/links/sock-*; attached again to the same
// cgroup they are updated in place, to another cgroup they move. It needs
// Config.LoadBalancing (the service maps). On any error nothing of socket-LB
// stays attached and the tc path serves Services as before; the error says why.
//
// Sockets in the caller's network namespace (the node's, for the agent) are
// refused a ClusterIP without a ready backend (EPERM at connect or sendmsg); other
// namespaces' (pods') go on to the tc path, which rejects with ICMP, and so do all
// sockets to a NodePort or external IP without one.
//
// Never attach it to a cgroup holding processes of other nodes or of the machine
// (in the lab, the machine's root cgroup): it translates for all of them.
func (d *Datapath) AttachSocketLB(cgroup string) (err error) {
	if !d.cfg.LoadBalancing {
		return errors.New("attach socket-LB: load balancing is off: socket-LB serves the service maps of kube-proxy-replacement")
	}
	if err := checkCgroup2(cgroup); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.attachErrors.Add(1)
			_ = d.DetachSocketLB()
		}
	}()
	var objs sockObjectsLoaded
	if err := d.loadSock(&objs); err != nil {
		return err
	}
	defer objs.close()
	if err := os.MkdirAll(filepath.Join(d.cfg.PinDir, "links"), 0o700); err != nil {
		return fmt.Errorf("create links dir: %w", err)
	}
	for _, h := range sockHooks {
		if err := d.attachSockHook(h, h.prog(&objs), cgroup); err != nil {
			return err
		}
	}
	return nil
}

// checkCgroup2 checks that dir is a cgroup v2 directory.
func checkCgroup2(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("attach socket-LB to cgroup %s: %w: set cgroup-root to a cgroup v2 directory", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("attach socket-LB to cgroup %s: not a cgroup v2 directory (cgroup v1 can't run socket programs): set cgroup-root to one under the cgroup2 mount", dir)
	}
	return nil
}

// loadSock loads bpf/sock.c with the datapath's load balancing constants, its
// service maps opened from the pin dir.
func (d *Datapath) loadSock(objs *sockObjectsLoaded) error {
	spec, err := loadSock()
	if err != nil {
		return fmt.Errorf("load socket-LB spec: %w", err)
	}
	var specs sockSpecs
	if err := spec.Assign(&specs); err != nil {
		return fmt.Errorf("assign socket-LB spec: %w", err)
	}
	cidr := d.cfg.ClusterCIDR.Masked()
	mask := binary.NativeEndian.Uint32(net.CIDRMask(cidr.Bits(), 32))
	// The node's sockets are told apart by it: refused a ClusterIP without
	// backends, never translated to an external IP's (sock.c). Without it they
	// would be neither, silently.
	host, err := netnsCookie()
	if err != nil {
		return fmt.Errorf("read the node's network namespace cookie (SO_NETNS_COOKIE, Linux 5.14): %w", err)
	}
	for _, v := range []struct {
		name string
		spec *ebpf.VariableSpec
		val  any
	}{
		{"lb_enabled", specs.LbEnabled, uint8(1)},
		{"maglev_table_size", specs.MaglevTableSize, d.cfg.MaglevTableSize},
		{"node_ip", specs.NodeIp, networkUint32(d.cfg.NodeIP)},
		{"cluster_cidr_addr", specs.ClusterCidrAddr, networkUint32(cidr.Addr())},
		{"cluster_cidr_mask", specs.ClusterCidrMask, mask},
		{"host_netns_cookie", specs.HostNetnsCookie, host},
	} {
		if err := v.spec.Set(v.val); err != nil {
			return fmt.Errorf("set socket-LB %s: %w", v.name, err)
		}
	}
	// The pinned maps must match: the inner Maglev template as configureLoadBalancing sets it.
	specs.MyelinLbMaglev.InnerMap.MaxEntries = max(d.cfg.MaglevTableSize, 1)
	opts := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: d.cfg.PinDir}}
	if err := spec.LoadAndAssign(objs, opts); err != nil {
		return fmt.Errorf("load socket-LB programs: %w", err)
	}
	return nil
}

// netnsCookie is the cookie of the network namespace the calling thread is in:
// the node's, for the agent (host network). Socket-LB refuses sockets there a
// Service without a ready backend (bpf/sock.c): nothing else would stop their
// packets to the Service address before the uplink.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
}

// attachSockHook attaches prog to h's hook of cgroup through the link pinned as
// h.pin, updating a pinned link of the same cgroup in place.
func (d *Datapath) attachSockHook(h sockHook, prog *ebpf.Program, cgroup string) error {
	path := filepath.Join(d.cfg.PinDir, "links", h.pin)
	var st unix.Stat_t
	if err := unix.Stat(cgroup, &st); err != nil {
		return fmt.Errorf("stat cgroup %s: %w", cgroup, err)
	}
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		info, ierr := l.Info()
		same := ierr == nil && info.Cgroup() != nil && info.Cgroup().CgroupId == st.Ino
		if same && l.Update(prog) == nil {
			l.Close()
			return nil
		}
		_ = l.Detach()
		_ = l.Unpin()
		l.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(path)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: h.attach, Program: prog})
	if err != nil {
		return fmt.Errorf("attach %s to cgroup %s: %w", h.pin, cgroup, err)
	}
	defer l.Close()
	if err := l.Pin(path); err != nil {
		_ = l.Detach()
		return fmt.Errorf("pin link %s: %w", path, err)
	}
	return nil
}

// DetachSocketLB detaches and unpins the socket-LB links, if any: Services are
// then translated by the tc path only (what bpf-lb-sock false asks for). Sockets
// translated before keep their backend.
func (d *Datapath) DetachSocketLB() error {
	var errs []error
	for _, h := range sockHooks {
		path := filepath.Join(d.cfg.PinDir, "links", h.pin)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			if rmErr := os.Remove(path); rmErr != nil {
				errs = append(errs, fmt.Errorf("remove pin %s: %w", path, rmErr))
			}
			continue
		}
		_ = l.Detach()
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin link %s: %w", path, err))
		}
		l.Close()
	}
	return errors.Join(errs...)
}

// SocketLBAttached reports whether the socket-LB links are pinned (attached).
func (d *Datapath) SocketLBAttached() bool {
	for _, h := range sockHooks {
		if _, err := os.Stat(filepath.Join(d.cfg.PinDir, "links", h.pin)); err != nil {
			return false
		}
	}
	return true
}

// Cgroup2Mount returns where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup
// on a v2-only host, /sys/fs/cgroup/unified on a hybrid one), the default root
// socket-LB attaches to.
func Cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options ... - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(fs) > 0 && fs[0] == "cgroup2" {
			return fields[4], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return "", errors.New("find the cgroup2 mount: none mounted: mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup/unified) or set cgroup-root")
}
