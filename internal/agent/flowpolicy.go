package agent

import (
	"net/netip"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/policy"
)

// PolicyVerdict implements flowstore.PolicyVerdicter: a new connection of a pod that
// NetworkPolicy isolates in the flow's direction gets a POLICY_VERDICT flow, FORWARDED
// with the policies that allow it, or DROPPED (for a DROP_POLICY_DENIED drop), written
// to pv. Only new connections (a SYN without ACK, the first packet of a UDP/ICMP flow)
// and policy drops are looked at; false for everything else. It runs for every flow
// record, so it allocates nothing: pv is the caller's, reused.
func (l *flowLoop) PolicyVerdict(f, pv *flow.Flow) bool {
	pol := l.pol.Load()
	if pol == nil || !policyRelevant(f) {
		return false
	}
	v := pol.view.Load()
	if v == nil {
		return false
	}
	local, egress := f.Destination.IP, false
	if f.Direction == flow.Egress {
		local, egress = f.Source.IP, true
	}
	ip, err := netip.ParseAddr(local)
	if err != nil {
		return false
	}
	ep := v.state.Endpoints[ip]
	if ep == nil || (egress && len(ep.EgressPolicies) == 0) || (!egress && len(ep.IngressPolicies) == 0) {
		return false
	}
	*pv = *f
	pv.Type = flow.TypePolicyVerdict
	if f.Verdict == flow.Forwarded {
		pv.Policies = l.allowingPolicies(v, f, egress)
	}
	return true
}

// policyRelevant: a new connection, or a drop by policy.
func policyRelevant(f *flow.Flow) bool {
	switch {
	case f.Type == flow.TypeDrop:
		return f.DropReason == "DROP_POLICY_DENIED"
	case f.Type != flow.TypeL3L4 && f.Type != flow.TypeDNS:
		return false
	case f.TCPFlags != nil:
		return f.TCPFlags.SYN && !f.TCPFlags.ACK
	}
	return f.Packets == 0 && !f.IsReply // a summary carries packets
}

// allowingPolicies names the policies that allow f in its direction, when both ends
// are pods of view v: pods found in the loop's index, the answer in its cache.
func (l *flowLoop) allowingPolicies(v *policyView, f *flow.Flow, egress bool) []string {
	src, okS := podOf(&l.pods, v, f.Source.IP)
	dst, okD := podOf(&l.pods, v, f.Destination.IP)
	if !okS || !okD {
		return nil
	}
	r := l.verdicts.trace(v, verdictKey{src: src, dst: dst, proto: protocolNumber(f.Protocol), port: f.DstPort})
	if egress {
		return r.Egress.By
	}
	return r.Ingress.By
}

// protocolNumber is the IP protocol number of a flow's Protocol name, 0 for the
// protocols NetworkPolicy has no ports for.
func protocolNumber(name string) uint8 {
	switch name {
	case "TCP":
		return policy.ProtoTCP
	case "UDP":
		return policy.ProtoUDP
	case "SCTP":
		return policy.ProtoSCTP
	}
	return 0
}

func podOf(x *podIndex, v *policyView, ip string) (*policy.Pod, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, false
	}
	return x.in(v, a)
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

// verdictCache keeps the answers of a policy view's Tracer, so the flow reader
// evaluates the policies once per pod pair and port, not once per new connection.
// A new view (any policy, pod or namespace change) empties it. A question not
// cached costs the policies of its pods' namespaces: the view's policies were
// compiled for it when the view was made (a compilation per question was 4.8 ms at
// 1,000 policies).
type verdictCache struct {
	view   *policyView
	m      map[verdictKey]policy.TraceResult
	traces int // Tracer.Trace calls, for tests
}

func (c *verdictCache) trace(v *policyView, k verdictKey) policy.TraceResult {
	if c.view != v || len(c.m) >= verdictCacheMax {
		c.view, c.m = v, make(map[verdictKey]policy.TraceResult)
	}
	if r, ok := c.m[k]; ok {
		return r
	}
	c.traces++
	r := v.tracer.Trace(*k.src, *k.dst, k.proto, k.port)
	c.m[k] = r
	return r
}
