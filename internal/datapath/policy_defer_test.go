package datapath

import (
	"testing"
)

// A SYN that the sender's egress check allows is written once: where BPF
// delivers it to an isolated pod of this node, by the receiver's check,
// with both ends' bits (TestPrivilegedBPFPolicySYNWritesWhole); a SYN the
// receiver denies leaves no entry; where no receiver's check writes it (the
// receiver is not isolated, or the packet leaves the node), the sender's
// bit alone is written all the same, so the replies pass A's ingress.
func TestPrivilegedBPFPolicySYNDeferredWrite(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	fromPod := d.objs.MyelinFromPod
	aEgress := map[PolicyKey][]PolicyPort{egressOf(podA, idB): {tcpPort(8080), tcpPort(8081)},
		egressOf(podA, idRemote): {tcpPort(8080)}}
	bIsolated := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress | PolicyIngress, podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	for k, v := range aEgress {
		bIsolated.entries[k] = v
	}
	bOpen := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress | PolicyIngress}, entries: aEgress}
	toB := func(sport, dport uint16) pkt {
		return ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, dport)
	}
	toRemote := ipv4(protoTCP, podA, remoteIP).withSrc(podA, 4003).withDst(remoteIP, 8080)

	runPolicyRows(t, d, []policyRow{{seed: bIsolated, prog: fromPod, counterDir: "to-pod", progCase: progCase{
		name: "SYN A→B:8081: A's egress allows, B's ingress denies", in: toB(4001, 8081).build(), ctx: ctxPodA,
		verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}})
	if err := policyCTCount(0)(d); err != nil {
		t.Errorf("a SYN the receiver denied: %v", err)
	}

	p := toB(4002, 8080)
	runPolicyRows(t, d, []policyRow{{seed: bOpen, prog: fromPod, counterDir: "from-pod", progCase: progCase{
		name: "SYN A→B:8080, B not isolated", in: p.build(), ctx: ctxPodA,
		verdict: tcActRedirect, out: delivered(p), reason: "FORWARDED"}}})
	if _, v, aBit := policyCTOnly(t, d, podA); v != (myelinPolicyCtEntry{Ends: aBit | openedBy(aBit) | outOf(aBit)}) {
		t.Errorf("SYN to a pod that is not isolated left %+v, want A's end %#x alone, from A's egress check (OUT), opened by A", v, aBit)
	}

	runPolicyRows(t, d, []policyRow{{seed: bOpen, prog: fromPod, counterDir: "from-pod", progCase: progCase{
		name: "SYN A→remote pod:8080, leaves the node", in: toRemote.build(), ctx: ctxPodA,
		verdict: tcActOK, reason: "PASS_STACK"}}})
	if _, v, aBit := policyCTOnly(t, d, podA); v != (myelinPolicyCtEntry{Ends: aBit | openedBy(aBit) | outOf(aBit)}) {
		t.Errorf("SYN leaving the node left %+v, want A's end %#x alone, from A's egress check (OUT), opened by A", v, aBit)
	}
}
