package datapath

import "testing"

// A pod of another node (a client inside the cluster CIDR) reaching this
// node's NodePort with a local backend: the request gets the node IP as its
// source (NodePort SNAT, as for a remote backend), and the backend's reply to
// node IP:NAT port leaves the pod translated back to the NodePort frontend
// towards the client pod. The reply path pays only because its destination is
// the node IP; a pod-to-pod packet is untouched.
func TestPrivilegedLBNodePortPodClient(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			runLBCases(t, d, nodePortPodClientCases(d))
		})
	}
}

func nodePortPodClientCases(d *Datapath) []lbCase {
	const remotePod = "10.2.0.44" // a pod of another node, in the cluster CIDR
	req := ipv4(protoTCP, remotePod, nodeIP).withDst(nodeIP, nodePort)
	reply := fromPodB(ipv4(protoTCP, podBIP, nodeIP).withSrc(podBIP, 8080).withDst(nodeIP, testNATPort).withTCPFlags(0x12))
	direct := fromPodB(ipv4(protoTCP, podBIP, remotePod).withSrc(podBIP, 8080).withDst(remotePod, 40000).withTCPFlags(0x12))
	flow := func(d *Datapath) error {
		return checkNodePortFlows(d, []NodePortFlow{npTestFlow(remotePod, 40000, podBIP, 1, false, "tcp-syn")})
	}
	return []lbCase{
		{seed: oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}}), prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: flow,
			progCase: progCase{name: "pod client, local backend: DNAT and SNAT to the node IP", endpoints: seedB, in: req.build(), verdict: tcActOK,
				out: req.withSrc(nodeIP, testNATPort).withDst(podBIP, 8080).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: "local backend's reply to the node IP: back to the client pod from the NodePort",
			endpoints: seedB, in: reply.build(), verdict: tcActOK, out: reply.withSrc(nodeIP, nodePort).withDst(remotePod, 40000).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: "pod to pod with the flow's ports: untouched",
			endpoints: seedB, in: direct.build(), verdict: tcActOK, out: direct.build(), reason: "PASS_STACK"}},
	}
}

// A local backend whose egress is isolated and allows nothing still answers
// a NodePort client whose flow is SNATed to it (a pod of another node): its
// ingress check accepted the connection as it sees it (node IP:NAT port to
// B:8080), and its reply to node IP:NAT port is that connection, whatever
// np_reply then turns it into (the client pod from the NodePort). What B
// starts itself towards the client stays denied.
func TestPrivilegedLBNodePortPodClientEgressIsolated(t *testing.T) {
	requirePrivileged(t)
	const remotePod = "10.2.0.44" // a pod of another node, in the cluster CIDR
	isolated := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{{Endpoint: mustAddr(podBIP), Identity: IdentityAny}: {tcpPort(8080)}}}
	req := ipv4(protoTCP, remotePod, nodeIP).withDst(nodeIP, nodePort)
	snated := req.withSrc(nodeIP, testNATPort).withDst(podBIP, 8080)
	reply := fromPodB(ipv4(protoTCP, podBIP, nodeIP).withSrc(podBIP, 8080).withDst(nodeIP, testNATPort).withTCPFlags(0x12))
	ownSYN := fromPodB(ipv4(protoTCP, podBIP, remotePod).withSrc(podBIP, 8081).withDst(remotePod, 40000))
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})); err != nil {
				t.Fatal(err)
			}
			// The SNATed request leaves myelin_from_netdev by fib_forward to
			// B's veth, where myelin_to_pod checks it (from the uplink).
			rows := []policyRow{
				{seed: isolated, prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
					name: "client pod's SYN: DNAT and SNAT to the node IP", in: req.build(),
					verdict: tcActOK, out: snated.build(), reason: "PASS_STACK"}},
				{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
					name: "B's ingress accepts the SNATed SYN and tracks it", in: snated.build(),
					ctx: &skbCtx{IngressIfindex: 2}, verdict: tcActOK, reason: "PASS_STACK"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "B's SYN-ACK to the node IP: tracked, back to the client pod", in: reply.build(),
					verdict: tcActOK, out: reply.withSrc(nodeIP, nodePort).withDst(remotePod, 40000).build(), reason: "PASS_STACK"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "B's own SYN to the client pod: denied", in: ownSYN.build(),
					verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
			}
			runPolicyRows(t, d, rows)
		})
	}
}
