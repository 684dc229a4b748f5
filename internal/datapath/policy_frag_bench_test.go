package datapath

import (
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

// BenchmarkPolicyFragments times myelin_to_pod's ingress check of pod B (isolated,
// admitting A on UDP 8000) for a whole datagram of a tracked flow, a first fragment
// of the same flow (tracked, and its pass recorded in myelin_frags) and a later
// fragment (passed by that record, no policy lookup). Root:
// go test -run '^$' -bench PolicyFragments -count 5 ./internal/datapath/
func BenchmarkPolicyFragments(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := loadTestConfig(b, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	if err := seedPolicy(d, policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {udpPorts(8000, 8000)}}}); err != nil {
		b.Fatal(err)
	}
	p := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4000).withDst(podBIP, 8000)
	p.payload = fragPayload
	first, later := p.fragments(0x0100)
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"whole-datagram", p.build()},
		{"first-fragment", first},
		{"later-fragment", later},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := segment{in: c.in, prog: d.objs.MyelinToPod, ctx: *ctxForwarded, toStack: true}
			runSegment(b, s) // tracks the flow, records the first fragment
			var ns uint64
			for b.Loop() {
				ns += uint64(runSegment(b, s))
			}
			b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
		})
	}
}
