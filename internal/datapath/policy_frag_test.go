package datapath

import "testing"

// udpPort is a PolicyPort of UDP port p.
func udpPort(p uint16) PolicyPort { return PolicyPort{Proto: protoUDP, Lo: p, Hi: p} }

// A later fragment carries no ports: an isolated direction passes it where it
// passed its datagram's first fragment, at the same check, and judges it
// without ports otherwise (denied unless the peer is allowed on all ports). A
// denied first fragment clears what an earlier datagram with its id left.
// Ingress as the stack delivers it (myelin_to_pod).
func TestPrivilegedBPFPolicyFragmentsIngress(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			toPod := d.objs.MyelinToPod
			st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
				entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {udpPort(8000), tcpPort(8080)}}}
			tcp := ipv4(protoTCP, podA, podBIP).withSrc(podA, 4000).withDst(podBIP, 8080).withTCPFlags(tcpACK)
			tcp.payload = fragPayload
			tcpFirst, tcpLater := tcp.fragments(0x0102)
			toB := func(dport uint16) pkt {
				p := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4000).withDst(podBIP, dport)
				p.payload = fragPayload
				return p
			}
			first, later := toB(8000).fragments(0x0100)
			_, orphan := toB(8000).fragments(0x0101)
			deniedFirst, deniedLater := toB(9000).fragments(0x0100)
			step := func(name string, in []byte, pass bool) policyStep {
				return frameStep(name, toPod, "to-pod", in, nil, pass)
			}
			whole := step("whole datagram to an allowed port: passes", toB(8000).build(), true)
			whole.seed = st
			firstStep := step("first fragment to an allowed port: passes", first, true)
			firstStep.change = fragCount(0) // the whole datagram recorded nothing
			laterStep := step("its later fragment: passes", later, true)
			laterStep.change = fragCount(1)
			deniedLaterStep := step("so its later fragment is judged without ports: denied", deniedLater, false)
			deniedLaterStep.change = fragCount(0)
			runPolicySteps(t, d, []policyStep{
				whole, firstStep, laterStep,
				step("a later fragment whose first was not seen: judged without ports, denied", orphan, false),
				step("a first fragment to a denied port reusing the id: denied, its mark cleared", deniedFirst, false),
				deniedLaterStep,
				// TCP's later fragments are judged without ports: one could overlap the
				// first's header for a receiver that takes overlapping fragments.
				step("TCP: a first fragment to an allowed port passes", tcpFirst, true),
				step("TCP: its later fragment is judged without ports: denied", tcpLater, false),
			})
		})
	}
}

// The reply of an allowed request, fragmented (a large DNS answer), enters its
// isolated client whole: the first fragment as a tracked reply, the later one
// by the first's pass.
func TestPrivilegedBPFPolicyFragmentedReply(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	// A is isolated for ingress and allows nothing in.
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress}}
	req := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4001).withDst(podBIP, 53)
	reply := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 53).withDst(podA, 4001)
	reply.payload = fragPayload
	first, later := reply.fragments(0x0200)
	stranger := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 54).withDst(podA, 4001)
	stranger.payload = fragPayload
	sFirst, sLater := stranger.fragments(0x0201)
	request := verdictStep("A's request leaves A (tracked)", fromPod, "from-pod", req, ctxPodA, true)
	request.seed = st
	runPolicySteps(t, d, []policyStep{
		request,
		frameStep("the reply's first fragment enters A (a tracked reply)", toPod, "to-pod", first, nil, true),
		frameStep("the reply's later fragment enters A", toPod, "to-pod", later, nil, true),
		frameStep("another port's first fragment: a new flow, denied", toPod, "to-pod", sFirst, nil, false),
		frameStep("its later fragment: denied", toPod, "to-pod", sLater, nil, false),
	})
}

// Egress of A in myelin_from_pod, and B's ingress where BPF delivers it
// (endpoint_deliver): each check passes the later fragment by its own mark.
func TestPrivilegedBPFPolicyFragmentsEgress(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			fromPod := d.objs.MyelinFromPod
			st := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress, podBIP: PolicyIngress},
				entries: map[PolicyKey][]PolicyPort{
					egressOf(podA, idB):    {udpPort(8000)},
					ingressOf(podBIP, idA): {udpPort(8000)},
				}}
			p := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4002).withDst(podBIP, 8000)
			p.payload = fragPayload
			first, later := p.fragments(0x0300)
			_, orphan := p.fragments(0x0301)
			outFirst, outLater := deliveredFrags(p, 0x0300)
			ok := func(name string, in, out []byte) policyStep {
				s := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod",
					progCase: progCase{name: name, in: in, ctx: ctxPodA, verdict: tcActRedirect, out: out, reason: "FORWARDED"}}}
				if routing == HostRoutingLegacy {
					s.verdict, s.out, s.reason = tcActOK, nil, "PASS_STACK"
				}
				return s
			}
			firstStep := ok("first fragment: A's egress and B's ingress pass it", first, outFirst)
			firstStep.seed = st
			marks := 2 // egress and ingress
			if routing == HostRoutingLegacy {
				marks = 1 // B's ingress is myelin_to_pod's
			}
			laterStep := ok("later fragment: passes both", later, outLater)
			laterStep.change = fragCount(marks)
			runPolicySteps(t, d, []policyStep{
				firstStep, laterStep,
				{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
					name: "a later fragment whose first was not seen: A's egress denies", in: orphan, ctx: ctxPodA,
					verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}},
			})
		})
	}
}

// With BPF host routing and both pods isolated, a reply whose receiving end the
// sender's egress check found tracked skips the receiver's lookup
// (POLICY_RX_TRACKED): its first fragment still leaves the receiver's mark, so the
// later fragment of a fragmented reply (a big DNS answer from an isolated server)
// enters its isolated client too.
func TestPrivilegedBPFPolicyFragmentedReplySameNode(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	fromPod := d.objs.MyelinFromPod
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress | PolicyEgress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{
			egressOf(podA, idB):    {udpPort(53)},
			ingressOf(podBIP, idA): {udpPort(53)},
		}}
	// Pod A gets pod B's veth fixture, so deliveredFrags() fits what enters it.
	endpoints := map[string]EndpointInfo{podA: podB, podBIP: podB}
	req := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4003).withDst(podBIP, 53)
	reply := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 53).withDst(podA, 4003)
	reply.payload = fragPayload
	first, later := fromPodB(reply).fragments(0x0400)
	outFirst, outLater := deliveredFrags(reply, 0x0400)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	step := func(name string, in, out []byte, ctx *skbCtx) policyStep {
		return policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: name, endpoints: endpoints, in: in, ctx: ctx, verdict: tcActRedirect, out: out, reason: "FORWARDED"}}}
	}
	request := step("A's request reaches B (both ends tracked)", req.build(), delivered(req), ctxPodA)
	request.endpoints = seedAB
	request.seed = st
	runPolicySteps(t, d, []policyStep{
		request,
		step("B's reply's first fragment enters A (tracked at both ends)", first, outFirst, ctxB),
		step("its later fragment enters A", later, outLater, ctxB),
	})
}
