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
// socket-LB connected as myelin_sock_destroy_targets says.
type sockDestroyObjects struct {
	Prog    *ebpf.Program `ebpf:"myelin_sock_destroy_udp"`
	Targets *ebpf.Map     `ebpf:"myelin_sock_destroy_targets"`
}

// UDPSocketTarget names the connected UDP sockets socket-LB translated to Backend
// to close: all of them, or, with Via, those translated from frontend Via only (the
// backend left Via's Service but stays another frontend's).
type UDPSocketTarget struct {
	Backend Backend
	Via     *Frontend
}

func (t UDPSocketTarget) String() string {
	if t.Via == nil {
		return t.Backend.String()
	}
	return t.Backend.String() + " from " + t.Via.String()
}

// key is t as myelin_sock_destroy_targets holds it.
func (t UDPSocketTarget) key() (sockLbSockPeer, error) {
	if !t.Backend.Addr.Is4() {
		return sockLbSockPeer{}, fmt.Errorf("destroy UDP sockets to %s: not an IPv4 backend", t)
	}
	k := sockLbSockPeer{BackendAddr: networkUint32(t.Backend.Addr), BackendPort: htons(t.Backend.Port)}
	if t.Via != nil {
		fe := *t.Via
		if !fe.Addr.Is4() || fe.Addr.IsUnspecified() || fe.Proto != unix.IPPROTO_UDP {
			return sockLbSockPeer{}, fmt.Errorf("destroy UDP sockets to %s: not an IPv4 UDP frontend", t)
		}
		k.Frontend = sockLbSockRev{Addr: networkUint32(fe.Addr), Port: htons(fe.Port)}
	}
	return k, nil
}

// DestroyUDPSockets closes, with bpf_sock_destroy, the connected IPv4 UDP sockets
// socket-LB translated to each target's backend (their storage in
// myelin_lb_sock_peer names it; a socket a client connected to the backend's
// address by itself stays open), from the target's Via only when it has one, so
// clients get ECONNABORTED instead of sending on to a backend that went away. It
// runs the iterator once in each network namespace of netns (paths such as
// /proc/<pid>/ns/net or /run/netns/<name>; "" is the caller's own), however many
// targets there are, and returns how many sockets it closed. A namespace that is
// gone is skipped. A target that is not IPv4 (or whose Via is not an IPv4 UDP
// frontend) is reported in the error; the others are closed. The program is loaded
// for the call and released after it: backends leave seldom, and nothing stays
// pinned.
func (d *Datapath) DestroyUDPSockets(targets []UDPSocketTarget, netns []string) (int, error) {
	keys := make([]sockLbSockPeer, 0, len(targets))
	var errs []error // a target that can't be one leaves the others to close
	for _, t := range targets {
		k, err := t.key()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return 0, errors.Join(errs...)
	}
	what := targets[0].String()
	if len(targets) > 1 {
		what = fmt.Sprintf("%d backends (%s, ...)", len(targets), what)
	}
	closed, err := d.runSockDestroy(keys, false, netns, "close UDP sockets to "+what)
	return closed, errors.Join(append(errs, err)...)
}

// SweepUDPSockets closes, as DestroyUDPSockets does, the connected IPv4 UDP sockets
// socket-LB translated to a backend that is no longer programmed (not in
// myelin_lb_backends), in each network namespace of netns: those whose closing no
// queue remembers (queued when the agent stopped, past the queue's bound). A socket
// connected meanwhile to a backend added after the backends were read would be closed
// too: call it while no Service is being written (the agent: after its first Service
// sync, before it applies any other change).
func (d *Datapath) SweepUDPSockets(netns []string) (int, error) {
	var keys []sockLbSockPeer
	var id uint32
	var v myelinLbBackend
	it := d.objs.MyelinLbBackends.Iterate()
	for it.Next(&id, &v) {
		keys = append(keys, sockLbSockPeer{BackendAddr: v.Addr, BackendPort: v.Port})
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("sweep UDP sockets: read the backends: %w", err)
	}
	return d.runSockDestroy(keys, true, netns, "sweep UDP sockets of removed backends")
}

// runSockDestroy loads the iter/udp program with keys in its targets map (sweep:
// the backends to keep, else the targets to close) and runs it once in each network
// namespace of netns; what names the run in errors.
func (d *Datapath) runSockDestroy(keys []sockLbSockPeer, sweep bool, netns []string, what string) (int, error) {
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
	var sweepVal uint8
	if sweep {
		sweepVal = 1
	}
	if err := spec.Variables["sock_destroy_sweep"].Set(sweepVal); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	spec.Maps["myelin_sock_destroy_targets"].MaxEntries = uint32(max(len(keys), 1))
	var objs sockDestroyObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"myelin_lb_sock_peer": peer}}); err != nil {
		return 0, fmt.Errorf("load the UDP socket destroyer (iter/udp, bpf_sock_destroy): %w", err)
	}
	defer objs.Prog.Close()
	defer objs.Targets.Close()
	for _, k := range keys {
		if err := objs.Targets.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return 0, fmt.Errorf("%s: write the targets: %w", what, err)
		}
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
			errs = append(errs, fmt.Errorf("%s in %s: %w", what, nsName(ns), err))
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
