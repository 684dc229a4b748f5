package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/myelin-net/myelin/internal/testenv"
)

// BenchmarkConnection is the kernel's run time of myelin_from_pod for every
// segment of one TCP connection between pods A and B of the node (SYN, SYN-ACK,
// ACK, a request, a response, both FINs, the last ACK: what a TCP_CRR transaction
// sends), delivered with bpf_redirect_peer, with what an agent loads by default
// and each packet-path feature on against off: flow records (drained after each
// connection, as the agent would), and NetworkPolicy with both pods isolated both
// ways and allowing each other (the bench's policy cases: 100 NetworkPolicies
// select client and server). The differences are each feature's cost per
// connection in the programs without the lab's noise (docs/performance.md);
// policy-nobudget is policy on a datapath loaded without the per-pod budgets (the
// budget's test when a connection's entry is created, against none);
// ns/conn sums the kernel's measure of each run, ns/<segment> is each packet's.
// Run as root:
// go test -run '^$' -bench 'Connection$' -count 5 ./internal/datapath/
func BenchmarkConnection(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := connectionBenchDatapath(b, agentDefaultConfig())
	noBudget := agentDefaultConfig()
	noBudget.PolicyCTPodMax, noBudget.NATPodMax, noBudget.LBCTPodMax = 0, 0, 0
	dNoBudget := connectionBenchDatapath(b, noBudget)
	ports := []PolicyPort{tcpPort(80), tcpPort(443), tcpPort(9090), {Proto: protoTCP, Lo: 12000, Hi: 12100}, tcpPort(8080)}
	isolated := policyState{
		flags: map[string]PolicyFlags{podA: PolicyIngress | PolicyEgress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{
			egressOf(podA, idCIDR): ports, ingressOf(podBIP, idCIDR): ports,
			egressOf(podA, idB): ports, ingressOf(podBIP, idA): ports,
		},
	}
	r, err := d.NewFlowReader()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	recs := make([]FlowRecord, 128)
	ctxB := skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	for _, c := range []struct {
		name   string
		d      *Datapath
		flows  bool
		policy policyState
	}{
		{"off", d, false, policyState{}}, {"flows", d, true, policyState{}}, {"policy", d, false, isolated},
		{"policy-nobudget", dNoBudget, false, isolated},
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
				for i, s := range connectionSegments(sport, ctxB) {
					ns[i] += uint64(runSegment(b, d.objs.MyelinFromPod, s))
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
			if c.flows {
				b.ReportMetric(float64(records)/float64(b.N), "records/conn")
			}
			if err := policyCTCount(0)(d); err != nil {
				b.Errorf("after closed connections: %v", err)
			}
		})
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

// segment is one packet of a connection and the veth it leaves its pod on.
type segment struct {
	in  []byte
	ctx skbCtx
	// toStack: the program hands it to the stack (TC_ACT_OK), not a redirect.
	toStack bool
}

// segmentNames name connectionSegments' packets in the benchmark's figures.
var segmentNames = [...]string{"syn", "synack", "ack", "request", "response", "fin-a", "fin-b", "last-ack"}

// connectionSegments are the packets of one connection from A:sport to B:8080,
// with sequence numbers that close it (its policy entry is deleted at the last ACK).
func connectionSegments(sport uint16, ctxB skbCtx) []segment {
	ab := ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 8080)
	ba := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, sport))
	n := testPayloadLen
	finA, finB := 1000+n+1, 5000+n+1
	ps := []struct {
		p   pkt
		ctx skbCtx
	}{
		{ab.withTCPFlags(0x02).withSeq(999, 0), *ctxPodA},
		{ba.withTCPFlags(tcpSYNACK).withSeq(4999, 1000), ctxB},
		{ab.withTCPFlags(tcpACK).withSeq(1000, 5000), *ctxPodA},
		{ab.withTCPFlags(tcpACK|0x08).withSeq(1000, 5000), *ctxPodA},
		{ba.withTCPFlags(tcpACK|0x08).withSeq(5000, 1000+n), ctxB},
		{ab.withTCPFlags(tcpFINACK).withSeq(1000, 5000), *ctxPodA},
		{ba.withTCPFlags(tcpFINACK).withSeq(5000, finA), ctxB},
		{ab.withTCPFlags(tcpACK).withSeq(finA, finB), *ctxPodA},
	}
	segs := make([]segment, len(ps))
	for i, p := range ps {
		segs[i] = segment{in: p.p.build(), ctx: p.ctx}
	}
	return segs
}

// runSegment runs one segment through prog: its run time in ns; a verdict other
// than a redirect (TC_ACT_OK for a segment toStack) fails the benchmark. Call it
// on the benchmark's goroutine; elsewhere, use testRunSegment.
func runSegment(b *testing.B, prog *ebpf.Program, s segment) uint32 {
	took, err := testRunSegment(prog, s)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// testRunSegment runs one segment through prog: its run time in ns, or an error
// for a failed run or a verdict other than the segment's.
func testRunSegment(prog *ebpf.Program, s segment) (uint32, error) {
	ctx, err := binary.Append(nil, binary.LittleEndian, s.ctx)
	if err != nil {
		return 0, err
	}
	out := make([]byte, len(s.in)+256)
	ret, took, err := testRun(prog.FD(), s.in, out, ctx)
	want := uint32(tcActRedirect)
	if s.toStack {
		want = tcActOK
	}
	if err != nil || ret != want {
		return 0, fmt.Errorf("test-run: verdict %d, err %v; want %d", ret, err, want)
	}
	return took, nil
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
	query := segment{in: ipv4(protoUDP, podA, podBIP).withSrc(podA, 5353).withDst(podBIP, 53).build(), ctx: *ctxPodA}
	answer := segment{in: fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 53).withDst(podA, 5353)).build(),
		ctx: skbCtx{IngressIfindex: uint32(podB.IfIndex)}}
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
				q += uint64(runSegment(b, d.objs.MyelinFromPod, query))
				a += uint64(runSegment(b, d.objs.MyelinFromPod, answer))
			}
			b.ReportMetric(float64(q)/float64(b.N), "ns/query")
			b.ReportMetric(float64(a)/float64(b.N), "ns/answer")
		})
	}
}
