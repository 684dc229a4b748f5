package datapath

import (
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

// BenchmarkPolicyPortless times myelin_to_pod's ingress check of pod B (isolated,
// admitting A on UDP 8000) for what carries no ports of its own, against a whole
// datagram of a tracked flow: a first fragment of the same flow (tracked, and its
// pass recorded in myelin_frags), a later fragment (passed by that record, no
// policy lookup), and A's port unreachable about B's datagram to A (passed by B's
// tracked connection: a quote parse and a lookup). Root:
// go test -run '^$' -bench PolicyPortless -count 5 ./internal/datapath/
func BenchmarkPolicyPortless(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := loadTestConfig(b, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	if err := seedPolicy(d, policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {udpPort(8000)}}}); err != nil {
		b.Fatal(err)
	}
	p := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4000).withDst(podBIP, 8000)
	p.payload = fragPayload
	first, later := p.fragments(0x0100)
	fromB := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 8000).withDst(podA, 4000)
	unreach := ipv4(protoICMP, podA, podBIP).withICMPError(3, 3, 0, quote(fromB))
	// The flow tracked and its first fragment passed, as every case needs (a case
	// may run alone: -bench PolicyPortless/later-fragment).
	for _, in := range [][]byte{p.build(), first} {
		runSegment(b, segment{in: in, prog: d.objs.MyelinToPod, ctx: *ctxForwarded, toStack: true})
	}
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"whole-datagram", p.build()},
		{"first-fragment", first},
		{"later-fragment", later},
		{"icmp-error", unreach.build()},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := segment{in: c.in, prog: d.objs.MyelinToPod, ctx: *ctxForwarded, toStack: true}
			var ns uint64
			for b.Loop() {
				ns += uint64(runSegment(b, s))
			}
			b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
		})
	}
}
