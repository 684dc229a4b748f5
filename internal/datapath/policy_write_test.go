package datapath

import (
	"testing"
)

// policyCTOnly returns the one entry of myelin_policy_ct, its key, and the
// end bit of local pod ip in it.
func policyCTOnly(t *testing.T, d *Datapath, ip string) (myelinPolicyCtKey, myelinPolicyCtEntry, uint32) {
	t.Helper()
	only, val, err := trackedOne(d)
	if err != nil {
		t.Fatal(err)
	}
	bit := policyCTEndHi
	if u32Addr(only.AddrLo) == mustAddr(ip) {
		bit = policyCTEndLo
	}
	return only, val, bit
}

// openedBy is the opener's bit (enum policy_ct_ends) of the end whose end bit is end.
func openedBy(end uint32) uint32 {
	if end == policyCTEndLo {
		return policyCTOpenedLo
	}
	return policyCTOpenedHi
}

// outOf and inOf are the OUT and IN bits of the end whose bit is end: its
// egress or its ingress check set it.
func outOf(end uint32) uint32 { return policyCTOutOf(end) }
func inOf(end uint32) uint32  { return policyCTInOf(end) }

// A SYN's tracked entry is written whole: where BPF delivers it (from the
// uplink, or from a pod of this node) it starts afresh without a lookup, so
// whatever the tuple's entry held before (another end's bit, an old close
// state) is gone, and a same-node SYN gets exactly the bits of the two
// checks that allowed it; where the stack delivers it (myelin_to_pod), the
// sender's end may have been noted by an earlier program run, so the SYN
// adds its bit to the entry and clears the old close state.
func TestPrivilegedBPFPolicySYNWritesWhole(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	state := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress | PolicyIngress, podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idRemote): {tcpPort(8080)},
			ingressOf(podBIP, idA): {tcpPort(8080)}, egressOf(podA, idB): {tcpPort(8080)}}}
	if err := seedPolicy(d, *state); err != nil {
		t.Fatal(err)
	}
	syn := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, 7001).withDst(podBIP, 8080)
	uplink := policyRow{prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
		name: "SYN from a pod of another node, BPF delivers", in: syn.build(), ctx: &skbCtx{IngressIfindex: 2},
		verdict: tcActRedirect, out: delivered(syn), reason: "FORWARDED"}}
	runPolicyRows(t, d, []policyRow{uplink})
	k, v, bBit := policyCTOnly(t, d, podBIP)
	if want := bBit | inOf(bBit); v.Ends != want { // no opener: what the uplink brings names no pod to blame; IN: B's ingress check set it
		t.Fatalf("after the SYN the entry holds ends %#x, want B's end alone, from its ingress check, no opener: %#x", v.Ends, want)
	}
	// The other end's bit, an opener (a check of this node named it), a stale
	// OUT of B's (without B's bit) and a close state.
	stale := myelinPolicyCtEntry{Ends: bBit ^ policyCTEnds | openedBy(bBit) | outOf(bBit), Closing: 0xf, FinLo: 7, FinHi: 9}
	if err := policyCTPut(d, k, stale); err != nil {
		t.Fatal(err)
	}
	uplink.name = "the SYN again, the entry holding another end and a close state"
	runPolicyRows(t, d, []policyRow{uplink})
	if _, v, _ = policyCTOnly(t, d, podBIP); v != (myelinPolicyCtEntry{Ends: bBit | inOf(bBit)}) {
		t.Errorf("BPF-delivered SYN left %+v, want only B's end %#x (from its ingress check) and no close state", v, bBit)
	}

	if err := policyCTPut(d, k, stale); err != nil {
		t.Fatal(err)
	}
	runPolicyRows(t, d, []policyRow{{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
		name: "the SYN as the stack delivers it", in: syn.build(), ctx: &skbCtx{IngressIfindex: 2},
		verdict: tcActOK, reason: "PASS_STACK"}}})
	if _, v, _ = policyCTOnly(t, d, podBIP); v.Ends != policyCTEnds|openedBy(bBit)|inOf(bBit) || v.Closing != 0 {
		t.Errorf("stack-delivered SYN left %+v, want both ends and the opener (the noted ones kept: this check can't vouch for the sender), B's stale OUT replaced by IN (its ingress check set its bit), and no close state", v)
	}
	// B's own bit, set by its egress check, on a closing connection: the SYN
	// reopening the tuple sets it again from B's ingress check.
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: bBit | outOf(bBit), Closing: 0xf, FinLo: 7, FinHi: 9}); err != nil {
		t.Fatal(err)
	}
	runPolicyRows(t, d, []policyRow{{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
		name: "the SYN as the stack delivers it, on B's closing connection", in: syn.build(), ctx: &skbCtx{IngressIfindex: 2},
		verdict: tcActOK, reason: "PASS_STACK"}}})
	if _, v, _ = policyCTOnly(t, d, podBIP); v.Ends != bBit|inOf(bBit) || v.Closing != 0 {
		t.Errorf("stack-delivered SYN on a closing entry left %+v, want B's end from its ingress check (IN, OUT gone) and no close state", v)
	}

	local := ipv4(protoTCP, podA, podBIP).withSrc(podA, 6001).withDst(podBIP, 8080)
	runPolicyRows(t, d, []policyRow{{seed: state, prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
		name: "SYN A→B on one node: judged at both ends", in: local.build(), ctx: ctxPodA,
		verdict: tcActRedirect, out: delivered(local), reason: "FORWARDED"}}})
	if _, v, aBit := policyCTOnly(t, d, podA); v != (myelinPolicyCtEntry{Ends: policyCTEnds | openedBy(aBit) | outOf(aBit) | inOf(aBit^policyCTEnds)}) {
		t.Errorf("same-node SYN left %+v, want both ends, opened by A, A's from its egress check (OUT), B's from its ingress (IN), and no close state", v)
	}
}
