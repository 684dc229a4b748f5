package agent

import (
	"net/netip"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/policy"
)

// PolicyVerdict implements flowstore.PolicyVerdicter: a new connection of a pod that
// NetworkPolicy isolates in the flow's direction gets a POLICY_VERDICT flow, FORWARDED
// with the policies that allow it, or DROPPED (for a DROP_POLICY_DENIED drop). Only
// new connections (a SYN without ACK, the first packet of a UDP/ICMP flow) and policy
// drops are looked at; nil for everything else.
func (l *flowLoop) PolicyVerdict(f *flow.Flow) *flow.Flow {
	pol := l.pol.Load()
	if pol == nil || !policyRelevant(f) {
		return nil
	}
	v := pol.view.Load()
	if v == nil {
		return nil
	}
	local, egress := f.Destination.IP, false
	if f.Direction == flow.Egress {
		local, egress = f.Source.IP, true
	}
	ip, err := netip.ParseAddr(local)
	if err != nil {
		return nil
	}
	ep := v.state.Endpoints[ip]
	if ep == nil || (egress && len(ep.EgressPolicies) == 0) || (!egress && len(ep.IngressPolicies) == 0) {
		return nil
	}
	pv := *f
	pv.Type = flow.TypePolicyVerdict
	if f.Verdict == flow.Forwarded {
		pv.Policies = allowingPolicies(v.input, f, egress)
	}
	return &pv
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
// are pods the policy loop knows.
func allowingPolicies(in policy.Input, f *flow.Flow, egress bool) []string {
	src, okS := podOf(in, f.Source.IP)
	dst, okD := podOf(in, f.Destination.IP)
	if !okS || !okD {
		return nil
	}
	proto := map[string]uint8{"TCP": 6, "UDP": 17, "SCTP": 132}[f.Protocol]
	r := policy.Trace(in, src, dst, proto, f.DstPort)
	if egress {
		return r.Egress.By
	}
	return r.Ingress.By
}

func podOf(in policy.Input, ip string) (policy.Pod, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return policy.Pod{}, false
	}
	return policy.PodByIP(in.Pods, a)
}
