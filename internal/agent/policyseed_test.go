package agent

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
	"github.com/myelin-net/myelin/internal/testenv"
)

// Only a pod that no flag isolates yet and that the new state isolates in one
// direction has connections to seed, those of the direction that stays open:
// a pod isolated both ways has every packet judged, one isolated already is
// tracked already.
func TestSeedOpenDirections(t *testing.T) {
	a, b, c, d := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"),
		netip.MustParseAddr("10.1.0.3"), netip.MustParseAddr("10.1.0.4")
	st := policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
		a: {Flags: datapath.PolicyIngress},
		b: {Flags: datapath.PolicyEgress | datapath.PolicyEgressIncomplete},
		c: {Flags: datapath.PolicyIngress | datapath.PolicyEgress},
		d: {Flags: datapath.PolicyIngress},
	}}
	cur := map[netip.Addr]datapath.PolicyFlags{d: datapath.PolicyEgress}
	got := seedOpenDirections(st, cur)
	want := map[netip.Addr]bool{a: true, b: false}
	if len(got) != len(want) || got[a] != want[a] || got[b] != want[b] {
		t.Errorf("seedOpenDirections = %v, want %v (a: its egress stays open; b: its ingress)", got, want)
	}
}

func sock(state uint8, src string, sport uint16, dst string, dport uint16) *netlink.Socket {
	s := &netlink.Socket{Family: unix.AF_INET, State: state}
	s.ID.Source, s.ID.SourcePort = net.ParseIP(src), sport
	s.ID.Destination, s.ID.DestinationPort = net.ParseIP(dst), dport
	return s
}

// A TCP socket on a port the pod listens on (on its address or on all) was
// accepted: its peer opened it; any other the pod opened, and so every
// connected UDP socket. Listeners, closed and TIME_WAIT sockets, unconnected
// UDP sockets, loopback and the pod's connections to itself are no
// connections to track.
func TestSocketEnds(t *testing.T) {
	pod := netip.MustParseAddr("10.1.0.1")
	tcp := []*netlink.Socket{
		sock(tcpListen, "0.0.0.0", 80, "0.0.0.0", 0),
		sock(tcpListen, "10.1.0.1", 81, "0.0.0.0", 0),
		sock(tcpEstablished, "10.1.0.1", 80, "10.1.0.9", 40000),   // accepted (wildcard listener)
		sock(tcpEstablished, "10.1.0.1", 81, "10.1.0.9", 40001),   // accepted
		sock(tcpEstablished, "10.1.0.1", 40002, "10.2.0.5", 81),   // opened
		sock(2, "10.1.0.1", 40003, "10.2.0.5", 80),                // SYN_SENT: opened
		sock(tcpTimeWait, "10.1.0.1", 40004, "10.2.0.5", 80),      // gone
		sock(tcpEstablished, "127.0.0.1", 40005, "127.0.0.1", 80), // loopback
		sock(tcpEstablished, "10.1.0.1", 40006, "10.1.0.1", 81),   // to itself
	}
	udp := []*netlink.Socket{
		sock(tcpEstablished, "10.1.0.1", 5353, "10.96.0.10", 53),
		sock(tcpClose, "0.0.0.0", 53, "0.0.0.0", 0),
	}
	end := func(lport uint16, peer string, pport uint16, proto uint8, egress bool) datapath.PolicyCTEnd {
		return datapath.PolicyCTEnd{Local: pod, Peer: netip.MustParseAddr(peer), LocalPort: lport, PeerPort: pport,
			Proto: proto, Egress: egress}
	}
	want := []datapath.PolicyCTEnd{
		end(80, "10.1.0.9", 40000, unix.IPPROTO_TCP, false),
		end(81, "10.1.0.9", 40001, unix.IPPROTO_TCP, false),
		end(40002, "10.2.0.5", 81, unix.IPPROTO_TCP, true),
		end(40003, "10.2.0.5", 80, unix.IPPROTO_TCP, true),
		end(5353, "10.96.0.10", 53, unix.IPPROTO_UDP, true),
	}
	if got := socketEnds(pod, tcp, udp); !slices.Equal(got, want) {
		t.Errorf("socketEnds =\n%v\nwant\n%v", got, want)
	}
}

// before lists the sockets of the pods about to be isolated in one direction
// only, and seeds the connections of the direction that stays open; a pod
// whose sockets can't be listed leaves the others seeded; a pod still in
// admission (its sandbox ran nothing yet) is not read.
func TestPolicySeederBefore(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")
	e, peer := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.2.0.9")
	conns := func(ip netip.Addr) []datapath.PolicyCTEnd {
		return []datapath.PolicyCTEnd{
			{Local: ip, Peer: peer, LocalPort: 40000, PeerPort: 80, Proto: unix.IPPROTO_TCP, Egress: true},
			{Local: ip, Peer: peer, LocalPort: 80, PeerPort: 40000, Proto: unix.IPPROTO_TCP},
		}
	}
	var listed []string
	var seeded []datapath.PolicyCTEnd
	s := &policySeeder{
		sockets: func(ns string, ip netip.Addr) ([]datapath.PolicyCTEnd, error) {
			listed = append(listed, ns)
			if ip == c {
				return nil, io.ErrUnexpectedEOF
			}
			return conns(ip), nil
		},
		seed: func(e []datapath.PolicyCTEnd) (datapath.PolicyCTSeeded, error) {
			seeded = append(seeded, e...)
			return datapath.PolicyCTSeeded{Written: len(e)}, nil
		},
		ran: func(ip netip.Addr) bool { return ip != e },
		log: slog.New(slog.DiscardHandler),
	}
	st := policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
		a: {Flags: datapath.PolicyIngress}, b: {Flags: datapath.PolicyEgress}, c: {Flags: datapath.PolicyIngress},
		e: {Flags: datapath.PolicyIngress},
	}}
	ep := func(ip, ns string) api.Endpoint { return api.Endpoint{IP: ip, PodRef: api.PodRef{NetNS: ns}} }
	eps := []api.Endpoint{ep(a.String(), "/run/netns/a"), ep(b.String(), "/run/netns/b"), ep(c.String(), "/run/netns/c"),
		ep("10.1.0.4", "/run/netns/d"), ep(e.String(), "/run/netns/e")}
	s.before(st, nil, eps)
	slices.Sort(listed)
	if want := []string{"/run/netns/a", "/run/netns/b", "/run/netns/c"}; !slices.Equal(listed, want) {
		t.Errorf("listed the sockets of %v, want %v", listed, want)
	}
	want := []datapath.PolicyCTEnd{conns(a)[0], conns(b)[1]}
	if len(seeded) != len(want) || !slices.Contains(seeded, want[0]) || !slices.Contains(seeded, want[1]) {
		t.Errorf("seeded %v, want %v (a's own connection, b's accepted one)", seeded, want)
	}

	// A pod's seeds stop at its share of the table (policy-ct-pod-max).
	s.perPod, seeded = 1, nil
	s.sockets = func(string, netip.Addr) ([]datapath.PolicyCTEnd, error) {
		c := conns(a)
		return append(c, datapath.PolicyCTEnd{Local: a, Peer: peer, LocalPort: 40001, PeerPort: 80, Proto: unix.IPPROTO_TCP,
			Egress: true}), nil
	}
	s.before(policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{a: {Flags: datapath.PolicyIngress}}}, nil, eps)
	if len(seeded) != 1 || seeded[0] != conns(a)[0] {
		t.Errorf("seeded %v with policy-ct-pod-max 1, want a's first connection only", seeded)
	}
}

// podConnections reads a real namespace's sockets: the pod's address and a
// peer's on its loopback, a connection the pod opens, one it accepts, a
// connected UDP socket.
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
		defer podLn.Close()
		defer peerLn.Close()
		opened, err1 := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(pod.AsSlice())}}).Dial("tcp4", peerLn.Addr().String())
		accepted, err2 := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(peer.AsSlice())}}).Dial("tcp4", podLn.Addr().String())
		udp, err3 := (&net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IP(pod.AsSlice())}}).Dial("udp4", net.JoinHostPort(peer.String(), "53"))
		if err1 != nil || err2 != nil || err3 != nil {
			t.Errorf("dial: %v, %v, %v", err1, err2, err3)
			return
		}
		defer opened.Close()
		defer accepted.Close()
		defer udp.Close()
		got, err := podConnections(filepath.Join("/run/netns", name), pod)
		if err != nil {
			t.Errorf("podConnections: %v", err)
			return
		}
		port := func(a net.Addr) uint16 { return netip.MustParseAddrPort(a.String()).Port() }
		want := []datapath.PolicyCTEnd{
			{Local: pod, Peer: peer, LocalPort: port(opened.LocalAddr()), PeerPort: 9090, Proto: unix.IPPROTO_TCP, Egress: true},
			{Local: pod, Peer: peer, LocalPort: 8080, PeerPort: port(accepted.LocalAddr()), Proto: unix.IPPROTO_TCP},
			{Local: pod, Peer: peer, LocalPort: port(udp.LocalAddr()), PeerPort: 53, Proto: unix.IPPROTO_UDP, Egress: true},
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("podConnections lacks %+v; got %+v", w, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("podConnections = %+v, want %d connections", got, len(want))
		}
	})
}
