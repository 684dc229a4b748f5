package datapath

import (
	"fmt"
	"testing"
)

// tcpSYNACK is a SYN-ACK's flag byte (tcpACK, tcpFINACK: lb_ct_test.go).
const tcpSYNACK = 0x12

// testPayloadLen is the payload every test packet carries (pkt's default).
var testPayloadLen = uint32(len(ipv4(protoTCP, podA, podBIP).payload))

// policyCTCount requires myelin_policy_ct to hold n entries.
func policyCTCount(n int) func(*Datapath) error {
	return func(d *Datapath) error {
		if got := len(policyCTEntries(d)); got != n {
			return fmt.Errorf("myelin_policy_ct holds %d entries, want %d", got, n)
		}
		return nil
	}
}

// closeStep is a policyStep whose check runs after the program: it
// asserts the tracked entries the step left.
type closeStep struct {
	policyStep
	after func(*Datapath) error
}

func runCloseSteps(t *testing.T, d *Datapath, steps []closeStep) {
	t.Helper()
	for _, s := range steps {
		runPolicySteps(t, d, []policyStep{s.policyStep})
		if s.after != nil {
			if err := s.after(d); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}
	}
}

// A closed TCP connection gives its tracked entry back: once both FINs are
// acknowledged the entry is deleted, not left for the LRU to evict. Here B
// alone is isolated (ingress): A's segments are followed at B's ingress as
// the stack delivers them, B's at B's egress. Closing never lets a denied
// peer in: a SYN on a tuple whose entry is closing is judged, and denied
// once the policy no longer allows it; a segment on a deleted entry's tuple
// is judged again; a denied peer's FIN or ACK makes and deletes nothing; an
// allowed SYN reusing the tuple starts a clean close state, so the old
// connection's FIN numbers delete nothing.
func TestPrivilegedBPFPolicyCloseFrees(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			closeFrees(t, loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP}), routing)
		})
	}
}

func closeFrees(t *testing.T, d *Datapath, routing HostRouting) {
	ingressB := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	ab := ipv4(protoTCP, podA, podBIP).withSrc(podA, 7001).withDst(podBIP, 8080)
	ba := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 7001))
	toB := func(name string, p pkt, ok bool, entries int) closeStep {
		r := closeStep{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: name, in: p.build(), verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}}, after: policyCTCount(entries)}
		if ok {
			r.verdict, r.reason = tcActOK, "PASS_STACK"
		}
		return r
	}
	fromB := func(name string, p pkt, entries int) closeStep {
		r := closeStep{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
			name: name, in: p.build(), ctx: ctxPodB, verdict: tcActOK, reason: "PASS_STACK"}}}, after: policyCTCount(entries)}
		if routing == HostRoutingBPF {
			r.verdict, r.reason = tcActRedirect, "FORWARDED"
			r.out = p.withMACs(podASender.HostMAC, podAMAC).withTTL(p.ttl - 1).build()
		}
		return r
	}
	seeded := func(s closeStep) closeStep { s.seed = ingressB; return s }
	finAEnd := 1000 + testPayloadLen + 1
	finBEnd := 5000 + testPayloadLen + 1
	syn := ab.withSeq(999-testPayloadLen, 0)
	finA := ab.withTCPFlags(tcpFINACK).withSeq(1000, 5000)
	finB := ba.withTCPFlags(tcpFINACK).withSeq(5000, finAEnd)
	lastA := ab.withTCPFlags(tcpACK).withSeq(finAEnd, finBEnd)
	remote := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, 7001).withDst(podBIP, 8080)
	synDenied := toB("closing entry, B's policy tightened: a SYN on the tuple is denied", syn, false, 1)
	synDenied.change = func(d *Datapath) error { return d.DeletePolicy(ingressOf(podBIP, idA)) }
	staleDenied := toB("entry deleted, policy tightened: A's segment on the old tuple is denied", lastA, false, 0)
	staleDenied.change = synDenied.change
	runCloseSteps(t, d, []closeStep{
		seeded(toB("SYN A→B:8080 allowed and tracked", syn, true, 1)),
		toB("A's FIN passes its tracked entry", finA, true, 1),
		fromB("B's FIN acknowledges A's", finB, 1),
		toB("A's last ACK: both FINs acknowledged, the entry is deleted", lastA, true, 0),
		staleDenied,
		toB("a denied peer's FIN makes no entry", remote.withTCPFlags(tcpFINACK).withSeq(1, 1), false, 0),
		toB("a denied peer's ACK makes no entry", remote.withTCPFlags(tcpACK).withSeq(2, 2), false, 0),
		seeded(toB("SYN A→B:8080 tracked again", syn, true, 1)),
		toB("A's FIN: the entry is closing", finA, true, 1),
		synDenied,
		seeded(toB("SYN A→B:8080 once more", syn, true, 1)),
		toB("A's FIN", finA, true, 1),
		fromB("B's FIN acknowledges A's", finB, 1),
		toB("A reuses the tuple: its SYN is allowed and clears the old close", syn, true, 1),
		fromB("B's SYN-ACK", ba.withTCPFlags(tcpSYNACK).withSeq(4999-testPayloadLen, finAEnd-1-testPayloadLen), 1),
		toB("A's ACK reaching the old FIN's number deletes nothing", lastA, true, 1),
	})
}

// Both pods isolated both ways on one node (the bench's policy pair): every
// segment of a connection from SYN to the last ACK passes, the entry is
// deleted by the last ACK, and then a segment on the old tuple is judged by
// the policy again: denied once B's policy no longer allows A.
func TestPrivilegedBPFPolicyCloseSameNode(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			closeSameNode(t, loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP}), routing)
		})
	}
}

func closeSameNode(t *testing.T, d *Datapath, routing HostRouting) {
	both := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress | PolicyIngress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idB): {tcpPort(8080)}, ingressOf(podBIP, idA): {tcpPort(8080)},
			egressOf(podBIP, idA): {tcpPort(9999)}, ingressOf(podA, idB): {tcpPort(9999)}}}
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	ab := ipv4(protoTCP, podA, podBIP).withSrc(podA, 7002).withDst(podBIP, 8080)
	ba := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 7002))
	toA := func(p pkt) []byte { return p.withMACs(podASender.HostMAC, podAMAC).withTTL(p.ttl - 1).build() }
	// step runs p through the sender's myelin_from_pod; with legacy host
	// routing the stack then delivers it, through the receiver's myelin_to_pod.
	step := func(name string, p pkt, fromA bool, entries int) []closeStep {
		ctx, out := ctxPodB, toA(p)
		if fromA {
			ctx, out = ctxPodA, delivered(p)
		}
		s := closeStep{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinFromPod, counterDir: "from-pod",
			progCase: progCase{name: name, in: p.build(), ctx: ctx, verdict: tcActRedirect, out: out, reason: "FORWARDED"}}},
			after: policyCTCount(entries)}
		if routing == HostRoutingBPF {
			return []closeStep{s}
		}
		s.verdict, s.out, s.reason, s.after = tcActOK, nil, "PASS_STACK", nil
		stack := closeStep{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinToPod, counterDir: "to-pod",
			progCase: progCase{name: name + " (delivered by the stack)", in: p.build(), verdict: tcActOK, reason: "PASS_STACK"}}},
			after: policyCTCount(entries)}
		return []closeStep{s, stack}
	}
	finAEnd := 2000 + testPayloadLen + 1
	finBEnd := 8000 + testPayloadLen + 1
	var steps []closeStep
	for _, s := range [][]closeStep{
		step("SYN A→B", ab.withSeq(1999-testPayloadLen, 0), true, 1),
		step("SYN-ACK B→A", ba.withTCPFlags(tcpSYNACK).withSeq(7000, 2000), false, 1),
		step("A's FIN", ab.withTCPFlags(tcpFINACK).withSeq(2000, 7001), true, 1),
		step("B's FIN acknowledges A's", ba.withTCPFlags(tcpFINACK).withSeq(8000, finAEnd), false, 1),
		step("A's last ACK: both FINs acknowledged, the entry is deleted", ab.withTCPFlags(tcpACK).withSeq(finAEnd, finBEnd), true, 0),
		// B closes first: B's last ACK goes to A's port 7002, which A's
		// ingress allows only as a tracked reply (its policy allows 9999):
		// had B's egress check deleted the entry before A's ingress check
		// of the same ACK, that check would deny it.
		step("SYN A→B again", ab.withSeq(1999-testPayloadLen, 0), true, 1),
		step("B's FIN first", ba.withTCPFlags(tcpFINACK).withSeq(8000, 2000), false, 1),
		step("A's FIN acknowledges B's", ab.withTCPFlags(tcpFINACK).withSeq(2000, finBEnd), true, 1),
		step("B's last ACK (to A's port): delivered, then the entry is deleted", ba.withTCPFlags(tcpACK).withSeq(finBEnd, finAEnd), false, 0),
	} {
		steps = append(steps, s...)
	}
	steps[0].seed = both
	runCloseSteps(t, d, steps)

	// The entry is gone: a segment on the old tuple is judged again.
	stale := ab.withTCPFlags(tcpACK).withSeq(finAEnd, finBEnd)
	tightenA := func(d *Datapath) error { return d.DeletePolicy(egressOf(podA, idB)) }
	denied := closeStep{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinFromPod, counterDir: "from-pod",
		progCase: progCase{name: "after the close, A's egress tightened: a segment on the old tuple is denied", in: stale.build(),
			ctx: ctxPodA, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}, change: tightenA}, after: policyCTCount(0)}
	runCloseSteps(t, d, []closeStep{denied})
}

// A BIG TCP FIN (a GSO packet beyond 64 KiB: IPv4 total length 0) covers its
// payload by the skb's length. An ACK short of its end does not acknowledge
// it, so the connection's entry outlives the other end's FIN and last ACK.
// Taken by the total length, the payload wrapped and nearly any ACK counted.
func TestPrivilegedBPFPolicyCloseBigTCPFIN(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	ingressB := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	ab := ipv4(protoTCP, podA, podBIP).withSrc(podA, 7003).withDst(podBIP, 8080)
	ba := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 7003))
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	syn := closeStep{policyStep: policyStep{policyRow: policyRow{seed: ingressB, prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
		name: "SYN A→B:8080 tracked", in: ab.withSeq(999-testPayloadLen, 0).build(), verdict: tcActOK, reason: "PASS_STACK"}}}, after: policyCTCount(1)}
	runCloseSteps(t, d, []closeStep{syn})

	big := ab.withTCPFlags(tcpFINACK).withSeq(1000, 5000)
	big.payload = make([]byte, 3000)
	ret, err := d.objs.MyelinToPod.Run(runOptions(zeroTotLen(big.build()), skbCtxGSO{GSOSegs: 3, GSOSize: 1448}))
	if err != nil || ret != tcActOK {
		t.Fatalf("A's BIG TCP FIN at B's ingress: verdict %d, %v; want %d", ret, err, tcActOK)
	}
	finAEnd := uint32(1000 + 3000 + 1)
	finB := ba.withTCPFlags(tcpFINACK).withSeq(5000, 1001) // acknowledges A's first byte only
	lastA := ab.withTCPFlags(tcpACK).withSeq(finAEnd, 5000+testPayloadLen+1)
	runCloseSteps(t, d, []closeStep{
		{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
			name: "B's FIN, acknowledging 1 byte of A's FIN segment", in: finB.build(), ctx: ctxPodB, verdict: tcActRedirect, reason: "FORWARDED",
			out: finB.withMACs(podASender.HostMAC, podAMAC).withTTL(finB.ttl - 1).build()}}}, after: policyCTCount(1)},
		{policyStep: policyStep{policyRow: policyRow{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "A's ACK of B's FIN: A's FIN is still unacknowledged, the entry stays", in: lastA.build(), verdict: tcActOK, reason: "PASS_STACK"}}},
			after: policyCTCount(1)},
	})
}
