package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/myelin-net/myelin/internal/testenv"
)

// BenchmarkConnection is the kernel's run time of myelin's programs for every
// segment of one TCP connection (SYN, SYN-ACK, ACK, a request, a response, both
// FINs, the last ACK: what a TCP_CRR transaction sends), with what an agent loads
// by default and each packet-path feature on against off: flow records (drained
// after each connection, as the agent would), and NetworkPolicy with both pods
// isolated both ways and allowing each other (the bench's policy cases: 100
// NetworkPolicies select client and server). Between pods A and B of the node
// (off, flows, policy, policy-nobudget) every segment goes through
// myelin_from_pod, delivered with bpf_redirect_peer; cross-node-* runs what both
// nodes of a connection between pods of two nodes run, as two connections on
// this one: A as the client of a pod of another node (its segments through
// myelin_from_pod to the stack, the replies through myelin_from_netdev,
// delivered) and B as the server of one (the other way round), each segment's
// figure the sum of both nodes'. The differences are each feature's cost per
// connection in the programs without the lab's noise (docs/performance.md);
// policy-nobudget is policy on a datapath loaded without the per-pod budgets (the
// budget's test when a connection's entry is created, against none);
// legacy-* is the connection between A and B with legacy host routing: each
// segment through the sender's myelin_from_pod to the stack, then the
// receiver's myelin_to_pod (the stack's delivery, entering from the sender's
// veth), each segment's figure the sum of both; legacy-off-no-pod-check is
// legacy-off without this node's PodCIDR checked where the stack delivers
// (Config.LocalPodCIDR: one endpoint lookup per segment in myelin_to_pod);
// nodeport-local is a client outside the cluster reaching pod B through the
// node's NodePort (nodePortLocalConn: the flow's entries start in the LRU and
// move to myelin_lb_ct_nodeport with the client's ACK, bpf/lib/nodeport_ct.h);
// ns/conn sums the kernel's measure of each run, ns/<segment> is each packet's.
// Run as root:
// go test -run '^$' -bench 'Connection$' -count 5 ./internal/datapath/
func BenchmarkConnection(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := connectionBenchDatapath(b, agentDefaultConfig())
	noBudget := agentDefaultConfig()
	noBudget.PolicyCTPodMax, noBudget.NATPodMax, noBudget.LBCTPodMax = 0, 0, 0
	dNoBudget := connectionBenchDatapath(b, noBudget)
	legacy := agentDefaultConfig()
	legacy.HostRouting = HostRoutingLegacy
	dLegacy := connectionBenchDatapath(b, legacy)
	legacy.LocalPodCIDR = netip.Prefix{}
	dLegacyUnchecked := connectionBenchDatapath(b, legacy)
	// A datapath of its own: the NodePort's backend port would mark pod B's
	// port 8080 for the other cases' SYNs (ct_forget_stale_reply).
	dNodePort := connectionBenchDatapath(b, agentDefaultConfig())
	if err := seedLB(dNodePort, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})); err != nil {
		b.Fatal(err)
	}
	ports := []PolicyPort{tcpPort(80), tcpPort(443), tcpPort(9090), {Proto: protoTCP, Lo: 12000, Hi: 12100}, tcpPort(8080)}
	isolated := policyState{
		flags: map[string]PolicyFlags{podA: PolicyIngress | PolicyEgress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{
			egressOf(podA, idCIDR): ports, ingressOf(podBIP, idCIDR): ports,
			egressOf(podA, idB): ports, ingressOf(podBIP, idA): ports,
			egressOf(podA, idRemote): ports, ingressOf(podBIP, idRemote): ports,
		},
	}
	r, err := d.NewFlowReader()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	recs := make([]FlowRecord, 128)
	for _, c := range []struct {
		name   string
		d      *Datapath
		flows  bool
		policy policyState
		conns  func(d *Datapath, sport uint16) [][]segment
	}{
		{"off", d, false, policyState{}, sameNodeConn}, {"flows", d, true, policyState{}, sameNodeConn},
		{"policy", d, false, isolated, sameNodeConn}, {"policy-nobudget", dNoBudget, false, isolated, sameNodeConn},
		{"cross-node-off", d, false, policyState{}, crossNodeConns},
		{"cross-node-policy", d, false, isolated, crossNodeConns},
		{"legacy-off", dLegacy, false, policyState{}, legacySameNodeConn},
		{"legacy-off-no-pod-check", dLegacyUnchecked, false, policyState{}, legacySameNodeConn},
		{"legacy-policy", dLegacy, false, isolated, legacySameNodeConn},
		{"nodeport-local", dNodePort, false, policyState{}, nodePortLocalConn},
	} {
		b.Run(c.name, func(b *testing.B) {
			d := c.d
			if err := seedPolicy(d, c.policy); err != nil {
				b.Fatal(err)
			}
			if err := d.SetFlows(c.flows); err != nil {
				b.Fatal(err)
			}
			var ns [len(segmentNames)]uint64
			var records int
			sport := uint16(20000)
			for b.Loop() {
				sport++
				if sport == 0 {
					sport = 20000
				}
				if sport%8192 == 0 {
					// Closed NodePort flows stay until the agent's GC: not
					// timed (ns/conn is the kernel's measure of each run).
					if err := clearCT(d); err != nil {
						b.Fatal(err)
					}
				}
				for _, conn := range c.conns(d, sport) {
					for i, s := range conn {
						ns[i] += uint64(runSegment(b, s))
					}
				}
				if c.flows {
					n, err := r.ReadBatch(recs)
					if err != nil {
						b.Fatal(err)
					}
					records += n
				}
			}
			var sum uint64
			for i, n := range ns {
				sum += n
				b.ReportMetric(float64(n)/float64(b.N), "ns/"+segmentNames[i])
			}
			b.ReportMetric(float64(sum)/float64(b.N), "ns/conn")
			if n, err := countEntries(d.objs.MyelinLbCtNodeport); c.d == dNodePort && (err != nil || n == 0) {
				b.Errorf("nodeport-local: myelin_lb_ct_nodeport holds %d entries (%v): no connection got past the LRU", n, err)
			}
			if c.flows {
				b.ReportMetric(float64(records)/float64(b.N), "records/conn")
			}
			if err := policyCTCount(0)(d); err != nil {
				b.Errorf("after closed connections: %v", err)
			}
		})
	}
}

// sameNodeConn is the connection from A:sport to B:8080, both pods of the node.
func sameNodeConn(d *Datapath, sport uint16) [][]segment {
	return [][]segment{connectionSegments(
		connEnd{addr: podA, port: sport, prog: d.objs.MyelinFromPod, ctx: *ctxPodA},
		connEnd{addr: podBIP, port: 8080, prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)}, macs: fromPodB})}
}

// nodePortLocalConn is the connection from a client outside the cluster
// (extHost:sport) to the node's NodePort whose backend is pod B: the client's
// segments through myelin_from_netdev (DNAT, delivered), pod B's through
// myelin_from_pod (the reply translated back, to the FIB, which test-run
// leaves to the stack).
func nodePortLocalConn(d *Datapath, sport uint16) [][]segment {
	return [][]segment{connectionSegments(
		connEnd{addr: extHost, port: sport, prog: d.objs.MyelinFromNetdev, ctx: skbCtx{IngressIfindex: 2}},
		connEnd{addr: podBIP, port: 8080, prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)},
			macs: fromPodB, toStack: true, front: nodeIP, frontPort: nodePort})}
}

// legacySameNodeConn is sameNodeConn with legacy host routing: each segment
// leaves its sender through myelin_from_pod to the stack and enters the
// receiver through myelin_to_pod.
func legacySameNodeConn(d *Datapath, sport uint16) [][]segment {
	return [][]segment{connectionSegments(
		connEnd{addr: podA, port: sport, prog: d.objs.MyelinFromPod, ctx: *ctxPodA, toStack: true, deliver: d.objs.MyelinToPod},
		connEnd{addr: podBIP, port: 8080, prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)},
			macs: fromPodB, toStack: true, deliver: d.objs.MyelinToPod})}
}

// crossNodeConns are a connection's two ends on two nodes, both run here: pod A
// the client of a pod of another node (remoteIP:8080), and pod B the server of one
// (remoteIP:sport). A pod's segments to the other node go to the stack (the test
// netns has no route for them); the other node's are delivered.
func crossNodeConns(d *Datapath, sport uint16) [][]segment {
	uplink := skbCtx{IngressIfindex: 2}
	return [][]segment{
		connectionSegments(
			connEnd{addr: podA, port: sport, prog: d.objs.MyelinFromPod, ctx: *ctxPodA, toStack: true},
			connEnd{addr: remoteIP, port: 8080, prog: d.objs.MyelinFromNetdev, ctx: uplink}),
		connectionSegments(
			connEnd{addr: remoteIP, port: sport, prog: d.objs.MyelinFromNetdev, ctx: uplink},
			connEnd{addr: podBIP, port: 8080, prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)},
				macs: fromPodB, toStack: true}),
	}
}

// connectionBenchDatapath loads cfg with pods A and B and an ipcache as a
// cluster's: a /32 per pod of 1,000, and the fixtures' CIDRs.
func connectionBenchDatapath(b *testing.B, cfg Config) *Datapath {
	d := loadTestConfig(b, cfg)
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 32)
		if err := d.SetIPCache(p, uint32(1000+i)); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// segment is one packet of a connection, the program it enters and its context.
type segment struct {
	in   []byte
	prog *ebpf.Program
	ctx  skbCtx
	// toStack: the program hands it to the stack (TC_ACT_OK), not a redirect.
	toStack bool
	// deliver, if set, is the program the stack then delivers it through
	// (myelin_to_pod, which passes it), entering from the sender's device
	// (ctx's ingress ifindex). It gets the packet as sent: myelin_to_pod reads
	// its IPv4 and TCP headers, which the stack's forwarding leaves as they are
	// but for the TTL.
	deliver *ebpf.Program
}

// segmentNames name connectionSegments' packets in the benchmark's figures.
var segmentNames = [...]string{"syn", "synack", "ack", "request", "response", "fin-a", "fin-b", "last-ack"}

// connEnd is one end of a benchmark connection: its address and port, and how its
// packets enter the programs (the program, its context, a redirect or the stack).
type connEnd struct {
	addr    string
	port    uint16
	prog    *ebpf.Program
	ctx     skbCtx
	macs    func(pkt) pkt // the packet as the end's device sends it; nil: as built
	toStack bool
	deliver *ebpf.Program // the packets to this end: the program the stack delivers them through, or nil
	// front and frontPort, when set, are where the client sends (a Service
	// frontend the server is a backend of); the server answers from addr:port.
	front     string
	frontPort uint16
}

// connectionSegments are the packets of one TCP connection from client to server
// (client.port is the source port), with sequence numbers that close it (its
// policy entry is deleted at the last ACK).
func connectionSegments(client, server connEnd) []segment {
	ab := ipv4(protoTCP, client.addr, server.addr).withSrc(client.addr, client.port).withDst(server.addr, server.port)
	if server.front != "" {
		ab = ab.withDst(server.front, server.frontPort)
	}
	ba := ipv4(protoTCP, server.addr, client.addr).withSrc(server.addr, server.port).withDst(client.addr, client.port)
	if client.macs != nil {
		ab = client.macs(ab)
	}
	if server.macs != nil {
		ba = server.macs(ba)
	}
	n := testPayloadLen
	finA, finB := 1000+n+1, 5000+n+1
	ps := []struct {
		p  pkt
		by *connEnd
	}{
		{ab.withTCPFlags(0x02).withSeq(999, 0), &client},
		{ba.withTCPFlags(tcpSYNACK).withSeq(4999, 1000), &server},
		{ab.withTCPFlags(tcpACK).withSeq(1000, 5000), &client},
		{ab.withTCPFlags(tcpACK|0x08).withSeq(1000, 5000), &client},
		{ba.withTCPFlags(tcpACK|0x08).withSeq(5000, 1000+n), &server},
		{ab.withTCPFlags(tcpFINACK).withSeq(1000, 5000), &client},
		{ba.withTCPFlags(tcpFINACK).withSeq(5000, finA), &server},
		{ab.withTCPFlags(tcpACK).withSeq(finA, finB), &client},
	}
	segs := make([]segment, len(ps))
	for i, p := range ps {
		to := &server
		if p.by == &server {
			to = &client
		}
		segs[i] = segment{in: p.p.build(), prog: p.by.prog, ctx: p.by.ctx, toStack: p.by.toStack, deliver: to.deliver}
	}
	return segs
}

// runSegment runs one segment through its program: its run time in ns; a verdict
// other than a redirect (TC_ACT_OK for a segment toStack) fails the benchmark. Call
// it on the benchmark's goroutine; elsewhere, use testRunSegment.
func runSegment(b *testing.B, s segment) uint32 {
	took, err := testRunSegment(s)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// testRunSegment runs one segment through its program: its run time in ns, or an
// error for a failed run or a verdict other than the segment's.
func testRunSegment(s segment) (uint32, error) {
	ctx, err := binary.Append(nil, binary.LittleEndian, s.ctx)
	if err != nil {
		return 0, err
	}
	out := make([]byte, len(s.in)+256)
	ret, took, err := testRun(s.prog.FD(), s.in, out, ctx)
	want := uint32(tcActRedirect)
	if s.toStack {
		want = tcActOK
	}
	if err != nil || ret != want {
		return 0, fmt.Errorf("test-run: verdict %d, err %v; want %d", ret, err, want)
	}
	if s.deliver == nil {
		return took, nil
	}
	dctx, err := binary.Append(nil, binary.LittleEndian, skbCtx{IngressIfindex: s.ctx.IngressIfindex})
	if err != nil {
		return 0, err
	}
	ret, then, err := testRun(s.deliver.FD(), s.in, out, dctx)
	if err != nil || ret != tcActOK {
		return 0, fmt.Errorf("test-run of the delivery: verdict %d, err %v; want %d", ret, err, tcActOK)
	}
	return took + then, nil
}

// BenchmarkPolicyDatagram is the kernel's run time of myelin_from_pod for a UDP
// query from pod A to B:53 and B's answer, delivered with bpf_redirect_peer, on a
// tracked flow (the steady state of a long UDP flow), with NetworkPolicy off and
// with both pods isolated both ways and allowing each other: the per-datagram cost
// of the policy's tracking, the last-seen refresh GCPolicyCT reads included (a
// write at most once a second per flow). Run as root:
// go test -run '^$' -bench 'PolicyDatagram' -count 5 ./internal/datapath/
func BenchmarkPolicyDatagram(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := loadTestConfig(b, agentDefaultConfig())
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	dns := []PolicyPort{{Proto: protoUDP, Lo: 53, Hi: 53}}
	isolated := policyState{
		flags:   map[string]PolicyFlags{podA: PolicyIngress | PolicyEgress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idB): dns, ingressOf(podBIP, idA): dns},
	}
	query := segment{in: ipv4(protoUDP, podA, podBIP).withSrc(podA, 5353).withDst(podBIP, 53).build(),
		prog: d.objs.MyelinFromPod, ctx: *ctxPodA}
	answer := segment{in: fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 53).withDst(podA, 5353)).build(),
		prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)}}
	for _, c := range []struct {
		name   string
		policy policyState
	}{{"off", policyState{}}, {"policy", isolated}} {
		b.Run(c.name, func(b *testing.B) {
			if err := seedPolicy(d, c.policy); err != nil {
				b.Fatal(err)
			}
			var q, a uint64
			for b.Loop() {
				q += uint64(runSegment(b, query))
				a += uint64(runSegment(b, answer))
			}
			b.ReportMetric(float64(q)/float64(b.N), "ns/query")
			b.ReportMetric(float64(a)/float64(b.N), "ns/answer")
		})
	}
}

// BenchmarkFlowsDatagram is the kernel's run time of myelin_from_pod for a UDP
// request from pod A to B:5201 and B's answer, delivered with bpf_redirect_peer,
// with flows off and on: the per-datagram cost of the flow aggregation (one read
// of the ports and a lookup in myelin_flow_state; a summary record every
// FLOW_SUMMARY_NS). Run as root:
// go test -run '^$' -bench 'FlowsDatagram' -count 5 ./internal/datapath/
func BenchmarkFlowsDatagram(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := loadTestConfig(b, agentDefaultConfig())
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	r, err := d.NewFlowReader()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	recs := make([]FlowRecord, 16)
	request := segment{in: ipv4(protoUDP, podA, podBIP).withSrc(podA, 40000).withDst(podBIP, 5201).build(),
		prog: d.objs.MyelinFromPod, ctx: *ctxPodA}
	answer := segment{in: fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 5201).withDst(podA, 40000)).build(),
		prog: d.objs.MyelinFromPod, ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)}}
	for _, flows := range []bool{false, true} {
		name := "off"
		if flows {
			name = "flows"
		}
		b.Run(name, func(b *testing.B) {
			// A new flow each run: its first datagram each way is a FLOW_NEW.
			if err := clearMap(d.objs.MyelinFlowState); err != nil {
				b.Fatal(err)
			}
			if err := d.SetFlows(flows); err != nil {
				b.Fatal(err)
			}
			var q, a uint64
			records := 0
			for b.Loop() {
				q += uint64(runSegment(b, request))
				a += uint64(runSegment(b, answer))
			}
			for {
				n, err := r.drain(recs)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					break
				}
				records += n
			}
			if flows && records < 2 {
				b.Errorf("flows on: %d records, want the FLOW_NEW of both directions at least", records)
			}
			if !flows && records != 0 {
				b.Errorf("flows off: %d records, want none", records)
			}
			b.ReportMetric(float64(q)/float64(b.N), "ns/request")
			b.ReportMetric(float64(a)/float64(b.N), "ns/answer")
		})
	}
}
