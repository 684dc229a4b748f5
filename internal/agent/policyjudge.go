package agent

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// policyJudge answers datapath.PolicyCTPurge.Allowed from a state the maps
// hold (applyPolicy asks only where the apply's writes went in): what the
// datapath's check of the end's pod (bpf/lib/policy.h, policy_enforce and
// policy_allows) decides for a new connection: its egress check for one the
// pod opens, towards the peer's port; else its ingress check, from the peer
// to the pod's port. The node's own addresses are judged as any peer: the
// datapath exempts them only on packets the host sends (kubelet probes), and
// keeps the ends that exemption let in without asking (POLICY_CT_HOST_PEER,
// datapath.policyCTAllowedAgain).
type policyJudge struct {
	st      policy.State
	entries map[datapath.PolicyKey][]datapath.PolicyPort
	// wide are st.IPCache's prefixes shorter than /32, longest first: an
	// address without a /32 has the identity of the first that holds it.
	wide []netip.Prefix
}

// purgeJudge is the PolicyCTPurge.Allowed of an apply that wrote st with
// outcome res: nil (every named end forgotten) unless held says the maps hold
// st, and never allowing an end of a pod whose own entries or flags failed.
func purgeJudge(st policy.State, want map[datapath.PolicyKey][]datapath.PolicyPort, res *policyApplied, held bool) func(datapath.PolicyCTEnd) bool {
	if !held {
		return nil
	}
	judge := newPolicyJudge(st, want)
	return func(e datapath.PolicyCTEnd) bool {
		return res.failed[e.Local] == nil && !res.unflagged[e.Local] && judge.allows(e)
	}
}

func newPolicyJudge(st policy.State, entries map[datapath.PolicyKey][]datapath.PolicyPort) *policyJudge {
	j := &policyJudge{st: st, entries: entries}
	for p := range st.IPCache {
		if p.Bits() < 32 {
			j.wide = append(j.wide, p)
		}
	}
	slices.SortFunc(j.wide, func(a, b netip.Prefix) int { return cmp.Compare(b.Bits(), a.Bits()) })
	return j
}

func (j *policyJudge) allows(e datapath.PolicyCTEnd) bool {
	var flags datapath.PolicyFlags
	if ep := j.st.Endpoints[e.Local]; ep != nil {
		flags = ep.Flags
	}
	on, port := datapath.PolicyIngress, e.LocalPort
	if e.Egress {
		on, port = datapath.PolicyEgress, e.PeerPort
	}
	if flags&on == 0 {
		return true
	}
	k := datapath.PolicyKey{Endpoint: e.Local, Identity: j.identity(e.Peer), Egress: e.Egress}
	if policy.PortAllowed(j.entries[k], e.Proto, port) {
		return true
	}
	k.Identity = datapath.IdentityAny
	return policy.PortAllowed(j.entries[k], e.Proto, port)
}

// identity is what myelin_ipcache's longest prefix holding addr says it is.
func (j *policyJudge) identity(addr netip.Addr) uint32 {
	if id, ok := j.st.IPCache[netip.PrefixFrom(addr, 32)]; ok {
		return id
	}
	for _, p := range j.wide {
		if p.Contains(addr) {
			return j.st.IPCache[p]
		}
	}
	return datapath.IdentityWorld
}
