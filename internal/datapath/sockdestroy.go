package datapath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// sockDestroyObjects is the iter/udp program of bpf/sock.c that closes UDP sockets
// socket-LB connected as sock_destroy_target says.
type sockDestroyObjects struct {
	Prog   *ebpf.Program  `ebpf:"myelin_sock_destroy_udp"`
	Target *ebpf.Variable `ebpf:"sock_destroy_target"`
}

// DestroyUDPSockets closes every connected IPv4 UDP socket socket-LB connected to b
// (its storage in myelin_lb_sock_peer names b; a socket a client connected to b's
// address by itself stays open) in each network namespace of netns (paths such as /proc/<pid>/ns/net or /run/netns/<name>;
// "" is the caller's own) with bpf_sock_destroy, so clients get ECONNABORTED instead
// of sending on to a backend that went away; it returns how many it closed. A
// namespace that is gone is skipped. The program is loaded for the call and
// released after it: backends leave seldom, and nothing stays pinned.
func (d *Datapath) DestroyUDPSockets(b Backend, netns []string) (int, error) {
	if !b.Addr.Is4() {
		return 0, fmt.Errorf("destroy UDP sockets to %s: not an IPv4 backend", b)
	}
	return d.destroyUDPSockets(sockLbSockPeer{BackendAddr: networkUint32(b.Addr), BackendPort: htons(b.Port)}, b.String(), netns)
}

// DestroyFrontendUDPSockets is DestroyUDPSockets for the sockets socket-LB connected
// to b from frontend fe only (their storage names both): b left fe (its Service's
// endpoints) but stays another frontend's backend, whose sockets stay open.
func (d *Datapath) DestroyFrontendUDPSockets(fe Frontend, b Backend, netns []string) (int, error) {
	if !b.Addr.Is4() || !fe.Addr.Is4() || fe.Addr.IsUnspecified() || fe.Proto != unix.IPPROTO_UDP {
		return 0, fmt.Errorf("destroy UDP sockets to %s from %s: not an IPv4 UDP frontend and backend", b, fe)
	}
	target := sockLbSockPeer{Frontend: sockLbSockRev{Addr: networkUint32(fe.Addr), Port: htons(fe.Port)},
		BackendAddr: networkUint32(b.Addr), BackendPort: htons(b.Port)}
	return d.destroyUDPSockets(target, b.String()+" from "+fe.String(), netns)
}

// destroyUDPSockets closes the sockets of target (sock_destroy_target of bpf/sock.c),
// named what in errors, in each namespace of netns.
func (d *Datapath) destroyUDPSockets(target sockLbSockPeer, what string, netns []string) (int, error) {
	spec, err := loadSock()
	if err != nil {
		return 0, fmt.Errorf("load socket-LB spec: %w", err)
	}
	peer, err := ebpf.LoadPinnedMap(filepath.Join(d.cfg.PinDir, "myelin_lb_sock_peer"), nil)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // socket-LB never ran here: no socket of it to close
	}
	if err != nil {
		return 0, fmt.Errorf("open the socket-LB socket storage map: %w", err)
	}
	defer peer.Close()
	var objs sockDestroyObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"myelin_lb_sock_peer": peer}}); err != nil {
		return 0, fmt.Errorf("load the UDP socket destroyer (iter/udp, bpf_sock_destroy): %w", err)
	}
	defer objs.Prog.Close()
	if err := objs.Target.Set(target); err != nil {
		return 0, fmt.Errorf("set sock_destroy_target: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: objs.Prog})
	if err != nil {
		return 0, fmt.Errorf("attach the UDP socket iterator: %w", err)
	}
	defer it.Close()
	closed := 0
	var errs []error
	for _, ns := range netns {
		n, err := iterateIn(it, ns)
		closed += n
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("close UDP sockets to %s in %s: %w", what, nsName(ns), err))
		}
	}
	return closed, errors.Join(errs...)
}

func nsName(ns string) string {
	if ns == "" {
		return "the agent's network namespace"
	}
	return ns
}

// iterateIn runs the iterator in network namespace ns ("" the caller's) and returns
// the bytes it wrote, one per socket closed. A thread that entered another namespace
// is never handed back to the scheduler: its goroutine exits still locked.
func iterateIn(it *link.Iter, ns string) (int, error) {
	if ns == "" {
		return readIter(it)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{0, err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{0, fmt.Errorf("enter: %w", err)}
			return
		}
		n, err := readIter(it)
		done <- result{n, err}
	}()
	r := <-done
	return r.n, r.err
}

// readIter opens one run of it (in the calling thread's network namespace) and
// reads it to the end.
func readIter(it *link.Iter) (int, error) {
	rd, err := it.Open()
	if err != nil {
		return 0, fmt.Errorf("open the UDP socket iterator: %w", err)
	}
	defer rd.Close()
	out, err := io.ReadAll(rd)
	return len(out), err
}

// Backend returns backend id; false if there is none.
func (d *Datapath) Backend(id uint32) (Backend, bool, error) {
	var v myelinLbBackend
	err := d.objs.MyelinLbBackends.Lookup(id, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Backend{}, false, nil
	}
	if err != nil {
		return Backend{}, false, fmt.Errorf("look up backend %d: %w", id, err)
	}
	return Backend{Addr: addrFromNetwork(v.Addr), Port: ntohs(v.Port)}, true, nil
}
