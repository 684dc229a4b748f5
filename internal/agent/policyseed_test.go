package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
	"github.com/myelin-net/myelin/internal/testenv"
)

// Only a pod that no flag isolates yet and that the new state isolates, in
// either direction or both, has connections to seed: one isolated already is
// tracked already.
func TestNewlyIsolated(t *testing.T) {
	a, b, c, d := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"),
		netip.MustParseAddr("10.1.0.3"), netip.MustParseAddr("10.1.0.4")
	st := policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
		a: {Flags: datapath.PolicyIngress},
		b: {Flags: datapath.PolicyEgress | datapath.PolicyEgressIncomplete},
		c: {Flags: datapath.PolicyIngress | datapath.PolicyEgress},
		d: {Flags: datapath.PolicyIngress},
	}}
	cur := map[netip.Addr]datapath.PolicyFlags{d: datapath.PolicyEgress}
	got := newlyIsolated(st, cur)
	if want := map[netip.Addr]bool{a: true, b: true, c: true}; !maps.Equal(got, want) {
		t.Errorf("newlyIsolated = %v, want %v", got, want)
	}
}

func sock(proto, state uint8, local, peer string) podSocket {
	return podSocket{proto: proto, state: state, local: netip.MustParseAddrPort(local), peer: netip.MustParseAddrPort(peer)}
}

// A TCP socket on a port the pod listens on (on its address or on all) was
// accepted: its peer opened it; any other on an ephemeral port the pod opened,
// and so every connected UDP socket on one. A socket on neither (an accepted
// connection whose listener was closed, a UDP server's connected socket) is
// left out: judged as new traffic. Listeners, unconnected UDP sockets,
// loopback and the pod's connections to itself are no connections to track.
func TestSocketEnds(t *testing.T) {
	pod := netip.MustParseAddr("10.1.0.1")
	const tcp, udp = unix.IPPROTO_TCP, unix.IPPROTO_UDP
	socks := []podSocket{
		sock(tcp, tcpListen, "0.0.0.0:80", "0.0.0.0:0"),
		sock(tcp, tcpListen, "10.1.0.1:81", "0.0.0.0:0"),
		sock(tcp, tcpEstablished, "10.1.0.1:80", "10.1.0.9:40000"),   // accepted (wildcard listener)
		sock(tcp, tcpCloseWait, "10.1.0.1:81", "10.1.0.9:40001"),     // accepted
		sock(tcp, tcpEstablished, "10.1.0.1:40002", "10.2.0.5:81"),   // opened
		sock(tcp, tcpFinWait2, "10.1.0.1:40003", "10.2.0.5:80"),      // opened
		sock(tcp, tcpEstablished, "127.0.0.1:40005", "127.0.0.1:80"), // loopback
		sock(tcp, tcpEstablished, "10.1.0.1:40006", "10.1.0.1:81"),   // to itself
		sock(tcp, tcpEstablished, "10.1.0.1:8080", "10.1.0.9:40007"), // its listener closed: left out
		sock(udp, tcpEstablished, "10.1.0.1:40010", "10.96.0.10:53"),
		sock(udp, tcpEstablished, "10.1.0.1:40011", "169.254.20.10:53"), // link-local: node-local DNS
		sock(udp, tcpEstablished, "10.1.0.1:3478", "10.2.0.7:50000"),    // a UDP server's: left out
		sock(udp, 7, "0.0.0.0:53", "0.0.0.0:0"),                         // unconnected
	}
	end := func(lport uint16, peer string, pport uint16, proto uint8, egress bool) datapath.PolicyCTEnd {
		return datapath.PolicyCTEnd{Local: pod, Peer: netip.MustParseAddr(peer), LocalPort: lport, PeerPort: pport,
			Proto: proto, Egress: egress}
	}
	want := []datapath.PolicyCTEnd{
		end(80, "10.1.0.9", 40000, tcp, false),
		end(81, "10.1.0.9", 40001, tcp, false),
		end(40002, "10.2.0.5", 81, tcp, true),
		end(40003, "10.2.0.5", 80, tcp, true),
		end(40010, "10.96.0.10", 53, udp, true),
		end(40011, "169.254.20.10", 53, udp, true),
	}
	if got := socketEnds(pod, socks, portRange{32768, 60999}); !slices.Equal(got, want) {
		t.Errorf("socketEnds =\n%v\nwant\n%v", got, want)
	}
}

// before lists the sockets of the pods about to be isolated for the first
// time and seeds all their connections; a pod whose sockets can't be listed
// leaves the others seeded; a pod still in admission (its sandbox ran nothing
// yet) is not read, nor one over its share of the table.
func TestPolicySeederBefore(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")
	e, f, peer := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.1.0.6"), netip.MustParseAddr("10.2.0.9")
	conns := func(ip netip.Addr) []datapath.PolicyCTEnd {
		return []datapath.PolicyCTEnd{
			{Local: ip, Peer: peer, LocalPort: 40000, PeerPort: 80, Proto: unix.IPPROTO_TCP, Egress: true},
			{Local: ip, Peer: peer, LocalPort: 80, PeerPort: 40000, Proto: unix.IPPROTO_TCP},
		}
	}
	var listed []string
	var seeded []datapath.PolicyCTEnd
	var limits []int
	var tooMany netip.Addr // a pod whose read ends with errTooManySockets
	s := &policySeeder{
		sockets: func(ns string, ip netip.Addr, limit int) ([]datapath.PolicyCTEnd, error) {
			listed = append(listed, ns)
			limits = append(limits, limit)
			switch ip {
			case c:
				return nil, io.ErrUnexpectedEOF
			case tooMany: // what it read before the limit comes along
				return conns(ip), fmt.Errorf("list TCP sockets: %w", errTooManySockets)
			}
			return conns(ip), nil
		},
		seed: func(e []datapath.PolicyCTEnd) (datapath.PolicyCTSeeded, error) {
			seeded = append(seeded, e...)
			return datapath.PolicyCTSeeded{Written: len(e)}, nil
		},
		ran: func(ip netip.Addr) bool { return ip != e },
		overBudget: func() (datapath.PodsOverBudget, error) {
			return datapath.PodsOverBudget{PolicyCT: map[netip.Addr]int{f: 9000}}, nil
		},
		log: slog.New(slog.DiscardHandler),
	}
	st := policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
		a: {Flags: datapath.PolicyIngress}, b: {Flags: datapath.PolicyEgress}, c: {Flags: datapath.PolicyIngress},
		e: {Flags: datapath.PolicyIngress}, f: {Flags: datapath.PolicyEgress},
	}}
	ep := func(ip, ns string) api.Endpoint { return api.Endpoint{IP: ip, PodRef: api.PodRef{NetNS: ns}} }
	eps := []api.Endpoint{ep(a.String(), "/run/netns/a"), ep(b.String(), "/run/netns/b"), ep(c.String(), "/run/netns/c"),
		ep("10.1.0.4", "/run/netns/d"), ep(e.String(), "/run/netns/e"), ep(f.String(), "/run/netns/f")}
	s.before(st, nil, eps)
	slices.Sort(listed)
	if want := []string{"/run/netns/a", "/run/netns/b", "/run/netns/c"}; !slices.Equal(listed, want) {
		t.Errorf("listed the sockets of %v, want %v", listed, want)
	}
	want := append(conns(a), conns(b)...)
	if len(seeded) != len(want) || !slices.Contains(seeded, want[0]) || !slices.Contains(seeded, want[1]) ||
		!slices.Contains(seeded, want[2]) || !slices.Contains(seeded, want[3]) {
		t.Errorf("seeded %v, want %v (a's and b's connections)", seeded, want)
	}

	// A pod's seeds stop at its share of the table (policy-ct-pod-max).
	s.perPod, seeded = 1, nil
	s.before(policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{a: {Flags: datapath.PolicyIngress}}}, nil, eps)
	if len(seeded) != 1 || seeded[0] != conns(a)[0] {
		t.Errorf("seeded %v with policy-ct-pod-max 1, want a's first connection only", seeded)
	}

	// A read stops at twice the pod's share (the table's without one), within
	// [seedSocketsMin, seedSocketsMax]; a pod with more sockets gets no seeds,
	// not even those read before the limit.
	for _, c := range []struct{ perPod, table, want int }{
		{0, 131072, 65536}, {0, 16384, 32768}, {32768, 131072, 65536}, {1 << 20, 1 << 22, 65536}, {10, 1024, 1024},
	} {
		s.perPod, s.tableSize, limits = c.perPod, c.table, nil
		s.before(policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{a: {Flags: datapath.PolicyIngress}}}, nil, eps)
		if !slices.Equal(limits, []int{c.want}) {
			t.Errorf("policy-ct-pod-max %d, policy-ct-max %d: read with limits %v, want [%d]", c.perPod, c.table, limits, c.want)
		}
	}
	tooMany, seeded = b, nil
	s.before(policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
		a: {Flags: datapath.PolicyIngress}, b: {Flags: datapath.PolicyEgress}}}, nil, eps)
	if want := conns(a); !slices.Equal(seeded, want) {
		t.Errorf("seeded %v with b over the read's limit, want only a's %v", seeded, want)
	}
}

// podConnections reads a real namespace's sockets: the pod's address and a
// peer's on its loopback, a connection the pod opens, one it accepts, one a
// dual-stack listener accepts (an AF_INET6 socket, v4-mapped), a connected
// UDP socket; not one from a fixed port that only an IPv6-only listener
// shares.
func TestPrivilegedPodConnections(t *testing.T) {
	testenv.RequireRoot(t, "create a network namespace")
	pod, peer := netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("10.200.0.2")
	testenv.InNetns(t, "agenttest-", func(name string) {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		for _, a := range []netip.Addr{pod, peer} {
			if err == nil {
				err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(net.IP(a.AsSlice()))})
			}
		}
		if err != nil {
			t.Errorf("set up lo: %v", err)
			return
		}
		podLn, err1 := net.Listen("tcp4", net.JoinHostPort(pod.String(), "8080"))
		peerLn, err2 := net.Listen("tcp4", net.JoinHostPort(peer.String(), "9090"))
		if err1 != nil || err2 != nil {
			t.Errorf("listen: %v, %v", err1, err2)
			return
		}
		dualLn, err3 := net.Listen("tcp", ":8081") // dual-stack: its sockets are AF_INET6, v4-mapped
		if err3 != nil {
			t.Errorf("listen: %v", err3)
			return
		}
		defer podLn.Close()
		defer peerLn.Close()
		defer dualLn.Close()
		opened, err1 := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(pod.AsSlice())}}).Dial("tcp4", peerLn.Addr().String())
		accepted, err2 := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(peer.AsSlice())}}).Dial("tcp4", podLn.Addr().String())
		udp, err3 := (&net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IP(pod.AsSlice())}}).Dial("udp4", net.JoinHostPort(peer.String(), "53"))
		dual, err4 := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(peer.AsSlice())}}).Dial("tcp4", net.JoinHostPort(pod.String(), "8081"))
		// An IPv6-only listener on 9300 covers no IPv4 socket: the pod's own
		// connection from pod:9300 (not an ephemeral port) is left out.
		v6only, err5 := (&net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1) })
			return errors.Join(err, serr)
		}}).Listen(context.Background(), "tcp6", "[::]:9300")
		var fixed net.Conn
		if err5 == nil {
			defer v6only.Close()
			fixed, err5 = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(pod.AsSlice()), Port: 9300}}).Dial("tcp4", peerLn.Addr().String())
		}
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
			t.Errorf("dial: %v, %v, %v, %v, %v", err1, err2, err3, err4, err5)
			return
		}
		defer fixed.Close()
		defer dual.Close()
		defer opened.Close()
		defer accepted.Close()
		defer udp.Close()
		nsPath := filepath.Join("/run/netns", name)
		got, err := podConnections(nsPath, pod, seedSocketsMin)
		if err != nil {
			t.Errorf("podConnections: %v", err)
			return
		}
		port := func(a net.Addr) uint16 { return netip.MustParseAddrPort(a.String()).Port() }
		want := []datapath.PolicyCTEnd{
			{Local: pod, Peer: peer, LocalPort: port(opened.LocalAddr()), PeerPort: 9090, Proto: unix.IPPROTO_TCP, Egress: true},
			{Local: pod, Peer: peer, LocalPort: 8080, PeerPort: port(accepted.LocalAddr()), Proto: unix.IPPROTO_TCP},
			{Local: pod, Peer: peer, LocalPort: port(udp.LocalAddr()), PeerPort: 53, Proto: unix.IPPROTO_UDP, Egress: true},
			{Local: pod, Peer: peer, LocalPort: 8081, PeerPort: port(dual.LocalAddr()), Proto: unix.IPPROTO_TCP},
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("podConnections lacks %+v; got %+v", w, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("podConnections = %+v, want %d connections", got, len(want))
		}
		podConnectionsLimit(t, nsPath, pod)
	})
}

// podConnectionsLimit checks the limit of a read of the namespace at nsPath
// (this thread's): one socket fewer than its TCP and UDP sockets ends the read
// in errTooManySockets, whether the TCP or the UDP dump crosses it; all of
// them is no error.
func podConnectionsLimit(t *testing.T, nsPath string, pod netip.Addr) {
	count := func(proto uint8, mask uint32) int {
		budget := 1 << 20
		if _, err := socketsOf(proto, mask, &budget); err != nil {
			t.Errorf("socketsOf(%d): %v", proto, err)
		}
		return 1<<20 - budget
	}
	tcp, udp := count(unix.IPPROTO_TCP, seedTCPStates), count(unix.IPPROTO_UDP, 1<<tcpEstablished)
	if tcp < 2 || udp < 1 {
		t.Fatalf("the namespace answered %d TCP and %d UDP sockets, want at least 2 and 1", tcp, udp)
	}
	for _, limit := range []int{tcp - 1, tcp + udp - 1} {
		if got, err := podConnections(nsPath, pod, limit); !errors.Is(err, errTooManySockets) || got != nil {
			t.Errorf("podConnections with limit %d of %d TCP + %d UDP sockets = %v, %v; want errTooManySockets", limit, tcp, udp, got, err)
		}
	}
	if _, err := podConnections(nsPath, pod, tcp+udp); err != nil {
		t.Errorf("podConnections with limit %d of %d TCP + %d UDP sockets: %v", tcp+udp, tcp, udp, err)
	}
}
