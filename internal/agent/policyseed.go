package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/policy"
)

// policySeeder tracks, before an apply isolates a pod in one direction, the
// connections it holds open in the other (docs/policy.md, "Connections open
// before isolation"). Pods without a policy are not tracked; without this, the
// first apply that isolates a pod's ingress would judge the replies of the
// connections the pod opened as new inbound traffic (a download from a peer
// the policy does not admit stalls until the pod sends again), and one that
// isolates its egress the pod's replies on connections its peers opened. A pod
// isolated both ways gets nothing: every packet of its connections is then
// judged by a policy, as a new connection's would be.
type policySeeder struct {
	// sockets lists the connections of the pod at ip in network namespace
	// path nsPath (podConnections).
	sockets func(nsPath string, ip netip.Addr) ([]datapath.PolicyCTEnd, error)
	// seed writes the connections into the table (datapath.SeedPolicyCT).
	seed func([]datapath.PolicyCTEnd) (datapath.PolicyCTSeeded, error)
	// ran says whether the pod at ip may hold connections: false while its
	// CNI ADD waits for admission (policyLoop.admitted), which saves reading an
	// empty namespace (~2 ms) on the ADD's path. nil: every pod may.
	ran func(ip netip.Addr) bool
	// perPod bounds the connections seeded for one pod (policy-ct-pod-max, which
	// its own packets could not open more of either); 0: no bound.
	perPod int
	log    *slog.Logger
}

// seedOpenDirections is the pods of st that cur (the flags the maps hold) does
// not isolate at all and st isolates in one direction only, each with the
// direction that stays open: true for egress (seed the connections the pod
// opened), false for ingress (those its peers opened).
func seedOpenDirections(st policy.State, cur map[netip.Addr]datapath.PolicyFlags) map[netip.Addr]bool {
	var out map[netip.Addr]bool
	for ip, ep := range st.Endpoints {
		if cur[ip] != 0 {
			continue
		}
		in, eg := ep.Flags&datapath.PolicyIngress != 0, ep.Flags&datapath.PolicyEgress != 0
		if in == eg {
			continue
		}
		if out == nil {
			out = map[netip.Addr]bool{}
		}
		out[ip] = in // ingress isolated: egress stays open
	}
	return out
}

// before seeds the open connections of the pods the apply of st is about to
// isolate in one direction (cur: the flags the maps hold; eps: the node's
// endpoints, for their network namespaces). What it can't do it logs: those
// connections are judged as new traffic, as they were before seeding existed.
func (s *policySeeder) before(st policy.State, cur map[netip.Addr]datapath.PolicyFlags, eps []api.Endpoint) {
	open := seedOpenDirections(st, cur)
	if len(open) == 0 {
		return
	}
	var ends []datapath.PolicyCTEnd
	var errs []error
	for _, ep := range eps {
		ip, err := netip.ParseAddr(ep.IP)
		if err != nil {
			continue
		}
		egress, ok := open[ip]
		if !ok || ep.NetNS == "" || (s.ran != nil && !s.ran(ip)) {
			continue
		}
		conns, err := s.sockets(ep.NetNS, ip)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", ep.Namespace, ep.Pod, err))
			continue
		}
		n, over := 0, false
		for _, c := range conns {
			switch {
			case c.Egress != egress:
			case s.perPod != 0 && n == s.perPod:
				over = true
			default:
				ends = append(ends, c)
				n++
			}
		}
		if over {
			s.log.Warn("policy: a pod about to be isolated holds more open connections than its share of the connection table; "+
				"the rest are judged as new traffic", "pod", ep.Namespace+"/"+ep.Pod, "seeded", n, "policy-ct-pod-max", s.perPod)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("policy: can't list the open connections of pods about to be isolated; their replies are judged as new traffic "+
			"(an agent in a container needs the runtime's netns directory: chart value socketLB.netnsPath)", "err", err)
	}
	done, err := s.seed(ends)
	if err != nil || done.Full > 0 || done.Stuck > 0 {
		s.log.Warn("policy: open connections of pods about to be isolated left untracked; their replies are judged as new traffic",
			"connections", len(ends), "buckets full", done.Full, "slots stuck", done.Stuck, "err", err)
	}
}

// podConnections lists the IPv4 TCP and connected UDP sockets of the pod at ip
// in the network namespace at nsPath that have a peer other than the pod, as
// ends of the pod: Egress when the pod opened the connection. A TCP socket
// whose local address and port a listening socket of the pod covers was
// accepted (its peer opened it); any other, and every connected UDP socket,
// the pod opened.
func podConnections(nsPath string, ip netip.Addr) ([]datapath.PolicyCTEnd, error) {
	var tcp, udp []*netlink.Socket
	err := netns.Do(nsPath, func() error {
		var err error
		if tcp, err = socketDump(netlink.SocketDiagTCP); err != nil {
			return fmt.Errorf("list TCP sockets: %w", err)
		}
		if udp, err = socketDump(netlink.SocketDiagUDP); err != nil {
			return fmt.Errorf("list UDP sockets: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return socketEnds(ip, tcp, udp), nil
}

// socketDump runs dump for IPv4 sockets, again when the kernel says the dump
// was interrupted (the table changed while it was read).
func socketDump(dump func(family uint8) ([]*netlink.Socket, error)) ([]*netlink.Socket, error) {
	var err error
	for range 3 {
		var out []*netlink.Socket
		if out, err = dump(unix.AF_INET); err == nil {
			return out, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
	}
	return nil, err
}

// TCP states (include/net/tcp_states.h) that socketEnds tells apart.
const (
	tcpEstablished = 1
	tcpTimeWait    = 6
	tcpClose       = 7
	tcpListen      = 10
)

// socketEnds is podConnections' reading of the sockets of the pod at ip.
func socketEnds(ip netip.Addr, tcp, udp []*netlink.Socket) []datapath.PolicyCTEnd {
	type bound struct {
		addr netip.Addr
		port uint16
	}
	listening := map[bound]bool{}
	for _, s := range tcp {
		if s.State == tcpListen {
			a, _ := netip.AddrFromSlice(s.ID.Source.To4())
			listening[bound{a, s.ID.SourcePort}] = true
		}
	}
	var out []datapath.PolicyCTEnd
	add := func(s *netlink.Socket, proto uint8, egress bool) {
		local, ok1 := netip.AddrFromSlice(s.ID.Source.To4())
		peer, ok2 := netip.AddrFromSlice(s.ID.Destination.To4())
		if !ok1 || !ok2 || local != ip || peer == ip || !peer.IsGlobalUnicast() {
			return
		}
		out = append(out, datapath.PolicyCTEnd{Local: local, Peer: peer, LocalPort: s.ID.SourcePort,
			PeerPort: s.ID.DestinationPort, Proto: proto, Egress: egress})
	}
	for _, s := range tcp {
		switch s.State {
		case tcpListen, tcpTimeWait, tcpClose:
			continue
		}
		local, _ := netip.AddrFromSlice(s.ID.Source.To4())
		accepted := listening[bound{local, s.ID.SourcePort}] || listening[bound{netip.IPv4Unspecified(), s.ID.SourcePort}]
		add(s, unix.IPPROTO_TCP, !accepted)
	}
	for _, s := range udp {
		if s.State == tcpEstablished {
			add(s, unix.IPPROTO_UDP, true)
		}
	}
	return out
}
