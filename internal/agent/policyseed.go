package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/policy"
)

// policySeeder tracks the connections a pod holds open before an apply first
// isolates it (docs/policy.md, "Connections open before isolation"). Pods
// without a policy are not tracked; without this, that apply would judge the
// packets of the pod's connections as new traffic: with its ingress isolated,
// the replies of the connections it opened (a download stalls: the pod, which
// only receives, sends nothing that would track it), with its egress isolated,
// its replies on those its peers opened. Each connection is tracked as the
// check of the direction it was opened in would have (the pod's egress check
// for one it opened, its ingress check for one it accepted); the apply's purge
// then judges it against the new policy in that direction, as it judges every
// tracked end of a pod whose policy changes: those the policy denies are
// forgotten, the others go on.
type policySeeder struct {
	// sockets lists the connections of the pod at ip in network namespace
	// path nsPath, reading at most limit sockets (podConnections).
	sockets func(nsPath string, ip netip.Addr, limit int) ([]datapath.PolicyCTEnd, error)
	// seed writes the connections into the table (datapath.SeedPolicyCT).
	seed func([]datapath.PolicyCTEnd) (datapath.PolicyCTSeeded, error)
	// ran says whether the pod at ip may hold connections: false while its
	// CNI ADD waits for admission (policyLoop.admitted), which saves reading an
	// empty namespace (~1.4 ms) on the ADD's path. nil: every pod may.
	ran func(ip netip.Addr) bool
	// perPod bounds the connections seeded for one pod (policy-ct-pod-max, which
	// its own packets could not open more of either); 0: no bound.
	perPod int
	// tableSize is the table's (policy-ct-max): what bounds a pod's seeds
	// when perPod does not.
	tableSize int
	// overBudget lists the pods over their share at the last GC round
	// (datapath.PodsOverBudget): they get no seeds. nil: none are.
	overBudget func() (datapath.PodsOverBudget, error)
	log        *slog.Logger
}

// newlyIsolated is the pods st isolates that cur (the flags the maps hold)
// isolates in no direction: the pods whose connections are not tracked yet.
func newlyIsolated(st policy.State, cur map[netip.Addr]datapath.PolicyFlags) map[netip.Addr]bool {
	var out map[netip.Addr]bool
	for ip, ep := range st.Endpoints {
		if cur[ip] != 0 || ep.Flags&(datapath.PolicyIngress|datapath.PolicyEgress) == 0 {
			continue
		}
		if out == nil {
			out = map[netip.Addr]bool{}
		}
		out[ip] = true
	}
	return out
}

// before seeds the open connections of the pods the apply of st is about to
// isolate for the first time (cur: the flags the maps hold; eps: the node's
// endpoints, for their network namespaces). What it can't do it logs: those
// connections are judged as new traffic, as they were before seeding existed.
func (s *policySeeder) before(st policy.State, cur map[netip.Addr]datapath.PolicyFlags, eps []api.Endpoint) {
	fresh := newlyIsolated(st, cur)
	if len(fresh) == 0 {
		return
	}
	var over map[netip.Addr]int
	if s.overBudget != nil {
		b, err := s.overBudget()
		if err != nil {
			s.log.Warn("policy: can't read which pods are over their connection table share; seeding all", "err", err)
		}
		over = b.PolicyCT
	}
	var ends []datapath.PolicyCTEnd
	var errs []error
	for _, ep := range eps {
		ip, err := netip.ParseAddr(ep.IP)
		if err != nil || !fresh[ip] || ep.NetNS == "" || (s.ran != nil && !s.ran(ip)) {
			continue
		}
		if _, ok := over[ip]; ok {
			s.log.Warn("policy: a pod about to be isolated is over its share of the connection table; its open connections are judged as new traffic",
				"pod", ep.Namespace+"/"+ep.Pod)
			continue
		}
		conns, err := s.sockets(ep.NetNS, ip, s.socketLimit())
		if errors.Is(err, errTooManySockets) {
			s.log.Warn("policy: a pod about to be isolated holds more sockets than the agent reads for it; "+
				"its open connections are judged as new traffic", "pod", ep.Namespace+"/"+ep.Pod, "limit", s.socketLimit())
			conns = nil
		} else if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", ep.Namespace, ep.Pod, err))
		}
		if s.perPod != 0 && len(conns) > s.perPod {
			s.log.Warn("policy: a pod about to be isolated holds more open connections than its share of the connection table; "+
				"the rest are judged as new traffic", "pod", ep.Namespace+"/"+ep.Pod, "connections", len(conns), "policy-ct-pod-max", s.perPod)
			conns = conns[:s.perPod]
		}
		ends = append(ends, conns...)
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("policy: can't list the open connections of pods about to be isolated; they are judged as new traffic "+
			"(an agent in a container needs the runtime's netns directory: chart value socketLB.netnsPath)", "err", err)
	}
	done, err := s.seed(ends)
	if err != nil || done.Full > 0 || done.Stuck > 0 {
		s.log.Warn("policy: open connections of pods about to be isolated left untracked; they are judged as new traffic",
			"connections", len(ends), "buckets full", done.Full, "slots stuck", done.Stuck, "err", err)
	}
}

// socketLimit is how many sockets one pod's read may answer with: twice the
// connections it may be seeded with (its share of the table, or the table's
// size without one: room for its listeners and for sockets that are no
// connection), within [seedSocketsMin, seedSocketsMax]. What a pod holds
// beyond it, it holds for itself: the read of a pod with more ends
// (errTooManySockets) before the agent decoded and kept them all, and none of
// its connections are seeded.
func (s *policySeeder) socketLimit() int {
	n := s.perPod
	if n == 0 {
		n = s.tableSize
	}
	return min(max(2*n, seedSocketsMin), seedSocketsMax)
}

// seedSocketsMin is the least socketLimit: tables as small as tests make them
// still read a pod with a few listeners. seedSocketsMax is the most: twice the
// default share (policy-ct-pod-max auto, a quarter of the default
// policy-ct-max); a larger table does not let one pod make the agent decode
// millions of answers, nor the kernel walk a bucket of as many SO_REUSEPORT
// listeners again for every part of its dump.
const (
	seedSocketsMin = 1024
	seedSocketsMax = 1 << 16
)

// TCP states (include/net/tcp_states.h) podConnections reads.
const (
	tcpEstablished = 1
	tcpFinWait1    = 4
	tcpFinWait2    = 5
	tcpCloseWait   = 8
	tcpLastAck     = 9
	tcpListen      = 10
	tcpClosing     = 11
)

// seedTCPStates are the TCP states podConnections asks for: listeners, and
// connections that carried traffic and are not closed (a SYN's is judged when
// it is sent again; a TIME_WAIT one is over).
const seedTCPStates = 1<<tcpEstablished | 1<<tcpFinWait1 | 1<<tcpFinWait2 | 1<<tcpCloseWait | 1<<tcpLastAck |
	1<<tcpClosing | 1<<tcpListen

// podConnections lists the TCP connections and connected UDP sockets of the pod
// at ip in the network namespace at nsPath, IPv4 and dual-stack IPv6 sockets
// alike, that have a peer other than the pod, as ends of the pod: Egress when
// the pod opened the connection (socketEnds). Sockets it could read are
// returned with an error about those it could not (UDP on a kernel without
// its diag module). A namespace with more than limit sockets in the states
// read is errTooManySockets, and nothing.
func podConnections(nsPath string, ip netip.Addr, limit int) ([]datapath.PolicyCTEnd, error) {
	var tcp, udp []podSocket
	var udpErr error
	ephemeral := portRange{32768, 60999} // the kernel's default
	budget := limit
	err := netns.Do(nsPath, func() error {
		var err error
		if tcp, err = socketsOf(unix.IPPROTO_TCP, seedTCPStates, &budget); err != nil {
			return fmt.Errorf("list TCP sockets: %w", err)
		}
		if udp, err = socketsOf(unix.IPPROTO_UDP, 1<<tcpEstablished, &budget); errors.Is(err, errTooManySockets) {
			return fmt.Errorf("list UDP sockets: %w", err)
		} else if err != nil {
			udpErr = fmt.Errorf("list UDP sockets: %w", err)
		}
		// Net sysctls answer for the opening thread's namespace: the pod's.
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
		if err == nil {
			_, err = fmt.Sscan(string(b), &ephemeral.lo, &ephemeral.hi)
		}
		if err != nil {
			return fmt.Errorf("read the ephemeral port range: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return socketEnds(ip, append(tcp, udp...), ephemeral), udpErr
}

// portRange is an inclusive range of ports (ip_local_port_range).
type portRange struct{ lo, hi uint16 }

func (r portRange) has(p uint16) bool { return r.lo <= p && p <= r.hi }

// socketEnds is podConnections' reading of the sockets of the pod at ip: a TCP
// socket whose local address and port a listener of the pod covers was
// accepted (its peer opened it); any other socket on a port of ephemeral the
// pod opened (connect() picked it). Any other is left out, judged as new
// traffic (fail closed): the pod could pass a connection a peer opened for
// one of its own by closing the listener.
func socketEnds(ip netip.Addr, socks []podSocket, ephemeral portRange) []datapath.PolicyCTEnd {
	listening := map[netip.AddrPort]bool{}
	for _, s := range socks {
		if s.proto == unix.IPPROTO_TCP && s.state == tcpListen {
			listening[s.local] = true
		}
	}
	var out []datapath.PolicyCTEnd
	for _, s := range socks {
		local, peer := s.local.Addr(), s.peer.Addr()
		if s.state != tcpEstablished && (s.proto != unix.IPPROTO_TCP || seedTCPStates&(1<<s.state) == 0 || s.state == tcpListen) ||
			local != ip || peer == ip || peer.IsUnspecified() || peer.IsLoopback() || peer.IsMulticast() {
			continue
		}
		accepted := s.proto == unix.IPPROTO_TCP &&
			(listening[s.local] || listening[netip.AddrPortFrom(netip.IPv4Unspecified(), s.local.Port())])
		if !accepted && !ephemeral.has(s.local.Port()) {
			continue
		}
		out = append(out, datapath.PolicyCTEnd{Local: local, Peer: peer, LocalPort: s.local.Port(),
			PeerPort: s.peer.Port(), Proto: s.proto, Egress: !accepted})
	}
	return out
}
