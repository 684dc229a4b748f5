package datapath

import "testing"

// An ICMP error about a TCP or UDP connection tracked for an isolated pod passes
// as the connection's replies do, from the peer (port unreachable) or from a router
// on the way (fragmentation needed, time exceeded); errors about connections not
// tracked for it, errors quoting another's packet and other ICMP are judged by the
// rules for ICMP (none here: denied). Ingress as the stack delivers it.
func TestPrivilegedBPFPolicyICMPErrorsIngress(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
			fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
			// A is isolated for ingress and admits nothing.
			st := &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress}}
			udp := ipv4(protoUDP, podA, remoteIP).withSrc(podA, 4001).withDst(remoteIP, 53)
			tcp := ipv4(protoTCP, podA, remoteIP).withSrc(podA, 4002).withDst(remoteIP, 443).withTCPFlags(tcpACK)
			untracked := udp.withSrc(podA, 4009)
			notA := ipv4(protoUDP, podBIP, remoteIP).withSrc(podBIP, 4001).withDst(remoteIP, 53)
			const router = "198.51.100.1"
			fragErr := ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, append(quote(udp), fragPayload...))
			errFirst, _ := fragErr.fragments(0x0500)
			out := func(name string, p pkt) policyStep {
				return verdictStep(name, fromPod, "from-pod", p, ctxPodA, true)
			}
			in := func(name string, p pkt, pass bool) policyStep {
				return verdictStep(name, toPod, "to-pod", p, nil, pass)
			}
			// No FIB in a test run: BPF routing hands it to the stack too.
			first := out("A's UDP leaves A (its egress open: tracked)", udp)
			first.seed = st
			runPolicySteps(t, d, []policyStep{
				first,
				out("A's TCP segment leaves A (tracked)", tcp),
				in("port unreachable from the peer, quoting A's datagram", ipv4(protoICMP, remoteIP, podA).withICMPError(3, 3, 0, quote(udp)), true),
				in("fragmentation needed from a router, quoting A's segment", ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, quote(tcp)), true),
				in("time exceeded from a router, quoting A's datagram", ipv4(protoICMP, router, podA).withICMPError(11, 0, 0, quote(udp)), true),
				in("an error about a connection A has not opened: denied", ipv4(protoICMP, remoteIP, podA).withICMPError(3, 3, 0, quote(untracked)), false),
				in("an error quoting another pod's packet: denied", ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, quote(notA)), false),
				in("an echo request from the peer: denied", ipv4(protoICMP, remoteIP, podA).withEcho(8, 7), false),
				// Pods are not routers: another pod quoting A's connection would reach A
				// past its policy (IP_RECVERR reads the quote's payload).
				in("an error from another pod, quoting A's datagram to the peer: denied", ipv4(protoICMP, podBIP, podA).withICMPError(3, 3, 0, quote(udp)), false),
				in("an error over 576 bytes: denied", ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, append(quote(udp), make([]byte, 560)...)), false),
				frameStep("the first fragment of an error: denied", toPod, "to-pod", errFirst, nil, false),
			})
		})
	}
}

// The same for an egress-isolated pod's own errors: its port unreachable about a
// datagram it received passes out to the sender; one about a datagram it never
// received, or sent to anyone else (a channel out past its policy), does not.
func TestPrivilegedBPFPolicyICMPErrorsEgress(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	// A is isolated for egress and may send nothing.
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress}}
	probe := ipv4(protoUDP, remoteIP, podA).withSrc(remoteIP, 5000).withDst(podA, 9)
	never := probe.withSrc(remoteIP, 5001)
	received := verdictStep("a datagram to A's closed port enters A (its ingress open: tracked)", toPod, "to-pod", probe, nil, true)
	received.seed = st
	out := func(name string, p pkt, pass bool) policyStep {
		return verdictStep(name, fromPod, "from-pod", p, ctxPodA, pass)
	}
	runPolicySteps(t, d, []policyStep{
		received,
		out("A's port unreachable about it leaves A", ipv4(protoICMP, podA, remoteIP).withICMPError(3, 3, 0, quote(probe)), true),
		out("one about a datagram A never received: denied", ipv4(protoICMP, podA, remoteIP).withICMPError(3, 3, 0, quote(never)), false),
		out("one about the datagram it received, sent to a third host: denied", ipv4(protoICMP, podA, "198.51.100.9").withICMPError(3, 3, 0, quote(probe)), false),
	})
}

// Where BPF delivers it (endpoint_deliver): pod B's port unreachable about A's
// datagram enters A, isolated for ingress, from B's veth on the same node.
func TestPrivilegedBPFPolicyICMPErrorDelivered(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
	fromPod := d.objs.MyelinFromPod
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress}}
	req := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4004).withDst(podBIP, 9)
	unreach := ipv4(protoICMP, podBIP, podA).withICMPError(3, 3, 0, quote(req.withTTL(63)))
	other := ipv4(protoICMP, podBIP, podA).withICMPError(3, 3, 0, quote(req.withSrc(podA, 4005).withTTL(63)))
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	// Pod A gets pod B's veth fixture, so delivered() fits what enters it.
	toA := map[string]EndpointInfo{podA: podB, podBIP: podB}
	request := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
		name: "A's datagram reaches B (A's egress open: tracked)", in: req.build(), ctx: ctxPodA,
		verdict: tcActRedirect, out: delivered(req), reason: "FORWARDED"}}}
	request.seed = st
	runPolicySteps(t, d, []policyStep{
		request,
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "B's port unreachable about it enters A", endpoints: toA, in: fromPodB(unreach).build(), ctx: ctxB,
			verdict: tcActRedirect, out: delivered(unreach), reason: "FORWARDED"}}},
		{policyRow: policyRow{prog: fromPod, counterDir: "to-pod", progCase: progCase{
			name: "one about a datagram A never sent: denied", endpoints: toA, in: fromPodB(other).build(), ctx: ctxB,
			verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}},
	})
}

// A NodePort backend isolated for egress answers a request it received with a
// port unreachable: the egress check judges the error by its quote as the
// backend wrote it (the request it got, tracked at its ingress), and the
// Service stage sends it back to the client from the NodePort. Before, the
// check ran after the Service stage had rewritten the quote to the NodePort,
// found no connection and judged the error as new ICMP: denied.
func TestPrivilegedBPFPolicyICMPErrorNodePortBackend(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod, fromNetdev := d.objs.MyelinFromPod, d.objs.MyelinFromNetdev
	feUDPNodePort := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	np := oneService(feUDPNodePort, Service{ID: 4, Flags: ServiceNodePort, Backends: []uint32{1}})
	req := ipv4(protoUDP, extHost, nodeIP).withDst(nodeIP, nodePort)
	toLocal := req.withDst(podBIP, 8080)
	clientQuote := func(q []byte) []byte {
		return frontQuote(restoredQuote(q, mustAddr(extHost), 40000), testNodeIP, nodePort)
	}
	localErr := fromPodB(ipv4(protoICMP, podBIP, extHost).withICMPError(3, 3, 0, quote(toLocal.withTTL(63))))
	localBack := fromPodB(ipv4(protoICMP, nodeIP, extHost).withICMPError(3, 3, 0, clientQuote(quote(toLocal.withTTL(63)))))
	never := fromPodB(ipv4(protoICMP, podBIP, extHost).withICMPError(3, 3, 0, quote(toLocal.withSrc(extHost, 40001).withTTL(63))))

	request := policyStep{policyRow: policyRow{prog: fromNetdev, counterDir: "from-netdev", progCase: progCase{
		name: "a client's datagram to the NodePort reaches B (B's ingress open: tracked)", endpoints: seedB,
		in: req.build(), verdict: tcActRedirect, out: delivered(toLocal), reason: "FORWARDED"}},
		change: func(d *Datapath) error { return seedLB(d, *np) }}
	request.seed = &policyState{flags: map[string]PolicyFlags{podBIP: PolicyEgress}}
	runPolicySteps(t, d, []policyStep{
		request,
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "B's port unreachable about it leaves from the NodePort", endpoints: seedB,
			in: localErr.build(), verdict: tcActOK, out: localBack.build(), reason: "PASS_STACK"}}},
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "one about a datagram B never received: denied", endpoints: seedB,
			in: never.build(), verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}},
	})
}

// A ClusterIP client isolated for egress answers its backend's reply with a
// port unreachable (its socket closed before the answer came): the Service
// stage sends the error on to the backend, quoting the reply as the backend
// sent it, and the egress check judges it by that quote (the connection A
// opened to B); B's ingress check by the same. Before, the error went to the
// ClusterIP untranslated and A's egress judged it as new ICMP: denied.
func TestPrivilegedBPFPolicyICMPErrorClusterIPClient(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod := d.objs.MyelinFromPod
	svc := oneService(feUDP, Service{ID: 3, Backends: []uint32{1}})
	req := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	replyGot := ipv4(protoUDP, vip, podA).withSrc(vip, 53).withDst(podA, 40000).withTTL(63)
	toB := ipv4(protoICMP, podA, podBIP).withICMPError(3, 3, 0,
		restoredQuote(quote(replyGot), mustAddr(podBIP), 8080))
	never := ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(replyGot.withDst(podA, 40999)))
	// A flow A opened before it was isolated: translated, but not tracked.
	early := req.withSrc(podA, 40002)
	untracked := ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(replyGot.withDst(podA, 40002)))
	untrackedToB := ipv4(protoICMP, podA, podBIP).withICMPError(3, 3, 0,
		restoredQuote(quote(replyGot.withDst(podA, 40002)), mustAddr(podBIP), 8080))
	endpoints := map[string]EndpointInfo{podA: podASender, podBIP: podB}

	before := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
		name: "A's datagram to the ClusterIP before A is isolated: reaches B, not tracked", endpoints: endpoints,
		in: early.build(), verdict: tcActRedirect, out: delivered(early.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		change: func(d *Datapath) error { return seedLB(d, *svc) }}
	before.seed = &policyState{}
	request := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
		name: "A's datagram to the ClusterIP reaches B (tracked at both ends)", endpoints: endpoints,
		in: req.build(), verdict: tcActRedirect, out: delivered(req.withDst(podBIP, 8080)), reason: "FORWARDED"}},
	}
	request.seed = &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress, podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{
			egressOf(podA, idB):    {udpPort(8080)},
			ingressOf(podBIP, idA): {udpPort(8080)},
		}}
	runPolicySteps(t, d, []policyStep{
		before, request,
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "A's port unreachable about the reply: to B, past both checks", endpoints: endpoints,
			in:      ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(replyGot)).build(),
			verdict: tcActRedirect, out: delivered(toB), reason: "FORWARDED"}}},
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "one about a reply A never got: judged as ICMP, denied", endpoints: endpoints,
			in: never.build(), verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}},
		{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{
			name: "one about the reply of the untracked flow: sent on to B, judged as ICMP, denied", endpoints: endpoints,
			in: untracked.build(), out: untrackedToB.build(), verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}},
	})
}
