package datapath

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestPrivilegedDestroyUDPSockets: the connected UDP socket to a removed backend is
// closed (its next read fails with ECONNABORTED); one to another backend stays.
func TestPrivilegedDestroyUDPSockets(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	if n, err := d.DestroyUDPSockets([]UDPSocketTarget{{Backend: sockBackends[1]}}, []string{""}); err != nil || n != 0 {
		t.Errorf("before socket-LB ever ran (no reverse map): %d, %v; want 0 and no error", n, err)
	}
	var objs sockObjectsLoaded // pins myelin_lb_sock_peer, as AttachSocketLB does
	if err := d.loadSock(&objs); err != nil {
		t.Fatal(err)
	}
	defer objs.close()
	inBackendsNetns(t, func(nsName string, ns netns.NsHandle) {
		conns, direct, ok := dialSockBackends(t, ns, objs.Peer)
		if !ok {
			return
		}
		n, err := d.DestroyUDPSockets([]UDPSocketTarget{{Backend: sockBackends[1]}}, []string{"/run/netns/" + nsName})
		if err != nil || n != 1 {
			t.Errorf("DestroyUDPSockets(%s) = %d, %v; want 1 closed", sockBackends[1], n, err)
		}
		expectAborted(t, conns[1], "read on the socket-LB socket to the removed backend")
		if _, err := conns[2].Write([]byte("hi\n")); err != nil {
			t.Errorf("the socket to the other backend: write: %v", err)
		}
		if _, err := direct.Write([]byte("hi\n")); err != nil {
			t.Errorf("a client's own socket to the removed backend's address was closed: write: %v", err)
		}
		if n, err := d.DestroyUDPSockets([]UDPSocketTarget{{Backend: sockBackends[1]}}, []string{"/run/netns/myelin-dptest-gone"}); err != nil || n != 0 {
			t.Errorf("a namespace that is gone: %d, %v; want 0 and no error", n, err)
		}
		// One pass for several targets: backend 1 again (nothing left), 2, and
		// one that can't be a target (reported; the others still closed).
		other := sockFrontend
		other.Port++
		bad := Backend{Addr: mustAddr("fd00::1"), Port: 8080}
		batch := []UDPSocketTarget{{Backend: sockBackends[1]}, {Backend: bad}, {Backend: sockBackends[2], Via: &other}, {Backend: sockBackends[2]}}
		if n, err := d.DestroyUDPSockets(batch, []string{"/run/netns/" + nsName}); n != 1 || err == nil || !strings.Contains(err.Error(), "fd00::1") {
			t.Errorf("DestroyUDPSockets(%v) = %d, %v; want 1 closed (backend 2's) and an error naming fd00::1", batch, n, err)
		}
		expectAborted(t, conns[2], "read on the socket-LB socket to backend 2 after the batch")
		if _, err := direct.Write([]byte("hi\n")); err != nil {
			t.Errorf("a client's own socket to backend 1's address was closed by the batch: write: %v", err)
		}
	})
}

// TestPrivilegedSweepUDPSockets: a sweep closes the socket-LB sockets to a backend
// that is no longer programmed (deleted while no agent ran) and keeps those to a
// programmed one and a client's own socket to the deleted backend's address.
func TestPrivilegedSweepUDPSockets(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	var objs sockObjectsLoaded // pins myelin_lb_sock_peer, as AttachSocketLB does
	if err := d.loadSock(&objs); err != nil {
		t.Fatal(err)
	}
	defer objs.close()
	kept, gone := sockBackends[2], sockBackends[1]
	if err := d.UpsertBackend(2, kept); err != nil {
		t.Fatal(err)
	}
	inBackendsNetns(t, func(nsName string, ns netns.NsHandle) {
		conns, direct, ok := dialSockBackends(t, ns, objs.Peer)
		if !ok {
			return
		}
		n, err := d.SweepUDPSockets([]string{"/run/netns/" + nsName})
		if err != nil || n != 1 {
			t.Errorf("SweepUDPSockets with backend %s programmed = %d, %v; want 1 closed (the socket to %s)", kept, n, err, gone)
		}
		expectAborted(t, conns[1], "read on the socket-LB socket to the backend no longer programmed")
		if _, err := conns[2].Write([]byte("hi\n")); err != nil {
			t.Errorf("the socket to the programmed backend: write: %v", err)
		}
		if _, err := direct.Write([]byte("hi\n")); err != nil {
			t.Errorf("a client's own socket to the deleted backend's address was closed: write: %v", err)
		}
	})
}

// dialSockBackends connects, in ns, a UDP socket to each of sockBackends as if
// socket-LB had translated it from sockFrontend (its storage in peer written as
// connect4 writes it), and direct, a client's own socket to backend 1; all are
// closed at the test's end. false (reported) when one could not be made.
func dialSockBackends(t *testing.T, ns netns.NsHandle, peer *ebpf.Map) (map[uint32]net.Conn, net.Conn, bool) {
	t.Helper()
	conns := map[uint32]net.Conn{}
	var direct net.Conn
	err := inNetnsThread(ns, func() error {
		for id, b := range sockBackends {
			c, err := net.Dial("udp4", netip.AddrPortFrom(b.Addr, b.Port).String())
			if err != nil {
				return err
			}
			conns[id] = c
			if err := writeSockPeer(peer, c, sockFrontend, b); err != nil {
				return err
			}
		}
		var err error
		direct, err = net.Dial("udp4", netip.AddrPortFrom(sockBackends[1].Addr, sockBackends[1].Port).String())
		return err
	})
	t.Cleanup(func() {
		for _, c := range append([]net.Conn{direct}, conns[1], conns[2]) {
			if c != nil {
				c.Close()
			}
		}
	})
	if err != nil {
		t.Error(err)
		return nil, nil, false
	}
	return conns, direct, true
}

// expectAborted fails the test unless a read on c (waiting at most 2 s) ends with
// ECONNABORTED, as on a socket bpf_sock_destroy closed; what names c.
func expectAborted(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, unix.ECONNABORTED) {
		t.Errorf("%s: %v, want ECONNABORTED", what, err)
	}
}

// sockFrontend is the frontend the sockets of the destroy tests were translated from.
var sockFrontend = Frontend{Addr: mustAddr("10.96.0.50"), Port: 80, Proto: protoUDP}

// TestPrivilegedDestroyFrontendUDPSockets: a backend left one frontend while
// another keeps it: of two sockets socket-LB connected to it, only the one
// translated from that frontend is closed.
func TestPrivilegedDestroyFrontendUDPSockets(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingLegacy, 0)
	var objs sockObjectsLoaded // pins myelin_lb_sock_peer, as AttachSocketLB does
	if err := d.loadSock(&objs); err != nil {
		t.Fatal(err)
	}
	defer objs.close()
	left := sockFrontend                                                      // the Service the backend left
	kept := Frontend{Addr: mustAddr("10.96.0.60"), Port: 80, Proto: protoUDP} // another namespace's, still listing it
	b := sockBackends[1]
	inBackendsNetns(t, func(nsName string, ns netns.NsHandle) {
		conns := map[Frontend]net.Conn{}
		err := inNetnsThread(ns, func() error {
			for _, fe := range []Frontend{left, kept} {
				c, err := net.Dial("udp4", netip.AddrPortFrom(b.Addr, b.Port).String())
				if err != nil {
					return err
				}
				conns[fe] = c
				if err := writeSockPeer(objs.Peer, c, fe, b); err != nil {
					return err
				}
			}
			return nil
		})
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		if err != nil {
			t.Error(err)
			return
		}
		n, err := d.DestroyUDPSockets([]UDPSocketTarget{{Backend: b, Via: &left}}, []string{"/run/netns/" + nsName})
		if err != nil || n != 1 {
			t.Errorf("DestroyUDPSockets(%s from %s) = %d, %v; want 1 closed", b, left, n, err)
		}
		expectAborted(t, conns[left], "read on the socket connected through the frontend the backend left")
		if _, err := conns[kept].Write([]byte("hi\n")); err != nil {
			t.Errorf("the socket connected through the other frontend: write: %v", err)
		}
	})
	if _, err := d.DestroyUDPSockets([]UDPSocketTarget{{Backend: b, Via: &Frontend{Addr: left.Addr, Port: 80, Proto: protoTCP}}}, nil); err == nil {
		t.Error("a TCP frontend was taken")
	}
}

// writeSockPeer writes c's socket storage for backend b, translated from frontend
// fe, into peer, as connect4 does (from user space, the key of socket storage is
// the socket's descriptor).
func writeSockPeer(peer *ebpf.Map, c net.Conn, fe Frontend, b Backend) error {
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		return err
	}
	v := sockLbSockPeer{Frontend: sockLbSockRev{Addr: networkUint32(fe.Addr), Port: htons(fe.Port)},
		BackendAddr: networkUint32(b.Addr), BackendPort: htons(b.Port)}
	var perr error
	if err := raw.Control(func(fd uintptr) { perr = peer.Put(int32(fd), &v) }); err != nil {
		return err
	}
	return perr
}
