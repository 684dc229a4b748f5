package agent

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/policy"
)

// PolicyVerdict implements flowstore.PolicyVerdicter: a new connection of a pod that
// NetworkPolicy isolates in the record's direction gets a POLICY_VERDICT record,
// FORWARDED with the policies that allow it, or DROPPED (for a DROP_POLICY_DENIED
// drop), written to pv. Only new connections (a SYN without ACK, the first packet of
// a UDP/ICMP flow) and policy drops are looked at; false for everything else. It
// runs for every flow record, so it allocates nothing: pv is the caller's, reused.
func (l *flowLoop) PolicyVerdict(r, pv *flow.Record) bool {
	pol := l.pol.Load()
	if pol == nil || !policyRelevant(r) {
		return false
	}
	v := pol.view.Load()
	if v == nil {
		return false
	}
	local, egress := r.DstIP, false
	if r.Direction == flow.Egress {
		local, egress = r.SrcIP, true
	}
	ep := v.state.Endpoints[netip.AddrFrom4(local)]
	if ep == nil || (egress && len(ep.EgressPolicies) == 0) || (!egress && len(ep.IngressPolicies) == 0) {
		return false
	}
	*pv = *r
	pv.Type = flow.TypePolicyVerdict
	if r.Verdict() == flow.Forwarded {
		pv.Policies = l.allowingPolicies(v, r, egress)
	}
	return true
}

// policyRelevant: a new connection, or a drop by policy.
func policyRelevant(r *flow.Record) bool {
	switch {
	case r.Full != nil:
		return false // made whole elsewhere: no datapath record
	case r.Type == flow.TypeDrop:
		return r.DropReason == "DROP_POLICY_DENIED"
	case r.Type != flow.TypeL3L4 && r.Type != flow.TypeDNS:
		return false
	case r.Proto == policy.ProtoTCP:
		return r.TCPFlags&(flow.TCPFlagSYN|flow.TCPFlagACK) == flow.TCPFlagSYN
	}
	return r.Packets == 0 && !r.IsReply() // a summary carries packets
}

// allowingPolicies names the policies that allow r in its direction, when both ends
// are pods of view v: pods found in the loop's index, the answer in its cache. None
// when the cache's traceBudget is spent.
func (l *flowLoop) allowingPolicies(v *policyView, r *flow.Record, egress bool) []string {
	src, okS := l.pods.in(v, netip.AddrFrom4(r.SrcIP))
	dst, okD := l.pods.in(v, netip.AddrFrom4(r.DstIP))
	if !okS || !okD {
		return nil
	}
	res, ok := l.verdicts.trace(v, verdictKey{src: src, dst: dst, proto: policyProto(r.Proto), port: r.DstPort})
	if !ok {
		return nil
	}
	if egress {
		return res.egress
	}
	return res.ingress
}

// flowPoliciesMax is how many allowing policies a flow names (hubble.FlowPoliciesMax).
const flowPoliciesMax = hubble.FlowPoliciesMax

// verdictAnswer is what the cache keeps of a policy.TraceResult: the policies that
// allow each direction, the first flowPoliciesMax, their names shared by every
// answer of the view (verdictCache.names). Its size does not grow with the policies
// a tenant writes: a TraceResult of 800 policies of 253-byte names was ~400 KB, by
// the 16,384 answers, and made a flow too large for the relay.
type verdictAnswer struct {
	ingress, egress []string
}

// policyProto is the protocol number NetworkPolicy has ports for, 0 for the others.
func policyProto(p uint8) uint8 {
	switch p {
	case policy.ProtoTCP, policy.ProtoUDP, policy.ProtoSCTP:
		return p
	}
	return 0
}

// verdictCacheMax bounds the cache: past it, it starts over.
const verdictCacheMax = 16384

// verdictKey is one question to policy.Trace: two pods of one policy view (their
// labels, namespaces, addresses and named ports are all Trace reads of them) and
// the connection's protocol and port.
type verdictKey struct {
	src, dst *policy.Pod
	proto    uint8
	port     uint16
}

// traceBudget is how long per second the flow reader may spend on policy verdicts
// its cache does not hold: past it, until the second ends, a FORWARDED verdict goes
// out without its policies list (verdictCache.skipped counts them). A question not
// cached evaluates the policies of its two pods' namespaces, ~10 µs at 1,000
// policies in 20 namespaces but more when one namespace holds most of them, and a
// pod can ask a new one per connection (a new port): without a bound it could make
// the reader too slow for the flow ring, and every flow of the node be lost.
const traceBudget = 50 * time.Millisecond

// verdictCache keeps the answers of a policy view's Tracer, so the flow reader
// evaluates the policies once per pod pair and port, not once per new connection.
// A new view (any policy, pod or namespace change) empties it. A question not
// cached costs the policies of its pods' namespaces: the view's policies were
// compiled for it when the view was made (a compilation per question was 2.5 ms at
// 1,000 policies); all questions not cached together cost at most traceBudget a
// second.
type verdictCache struct {
	view *policyView
	m    map[verdictKey]verdictAnswer
	// names holds one copy of each policy name the view's answers hold.
	names map[string]string
	// window is when the current second of traceBudget began; spent is the time
	// traced in it.
	window time.Time
	spent  time.Duration
	now    func() time.Time // time.Now but in tests
	// traces are the Tracer.Trace calls (tests); skipped the questions not traced
	// because traceBudget was spent (myelin_flow_policy_verdicts_skipped_total: read
	// by scrapes, hence atomic).
	traces  int
	skipped atomic.Uint64
}

// trace answers k about v from the cache or v's Tracer; false when it is not
// cached and traceBudget is spent for this second.
func (c *verdictCache) trace(v *policyView, k verdictKey) (verdictAnswer, bool) {
	if c.view != v || len(c.m) >= verdictCacheMax {
		c.view, c.m, c.names = v, make(map[verdictKey]verdictAnswer), map[string]string{}
	}
	if r, ok := c.m[k]; ok {
		return r, true
	}
	clock := c.now
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	if start.Sub(c.window) >= time.Second {
		c.window, c.spent = start, 0
	}
	if c.spent >= traceBudget {
		c.skipped.Add(1)
		return verdictAnswer{}, false
	}
	c.traces++
	r := v.tracer.Trace(*k.src, *k.dst, k.proto, k.port)
	a := verdictAnswer{ingress: c.shared(r.Ingress.By), egress: c.shared(r.Egress.By)}
	c.spent += clock().Sub(start)
	c.m[k] = a
	return a, true
}

// shared returns the first flowPoliciesMax of names in order (sorting names, a
// Trace's own), each the copy c.names holds.
func (c *verdictCache) shared(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	out := make([]string, 0, min(len(names), flowPoliciesMax))
	for _, n := range names[:cap(out)] {
		s, ok := c.names[n]
		if !ok {
			s = n
			c.names[n] = s
		}
		out = append(out, s)
	}
	return out
}
