package flowmetrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/myelin-net/myelin/internal/flow"
)

// knownFlows is a small day on a node: a TCP connection to a web pod (SYN, SYN-ACK
// reply, FIN), a policy drop, a NodePort flow, a ping, a DNS query and its answer,
// and a reader's gap that is no flow.
func knownFlows() []*flow.Flow {
	fwd := func(proto string, dport uint16, fl *flow.TCPFlags, reply bool) *flow.Flow {
		return &flow.Flow{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: proto, SrcPort: 40000, DstPort: dport, TCPFlags: fl, IsReply: reply}
	}
	return []*flow.Flow{
		fwd("TCP", 80, &flow.TCPFlags{SYN: true}, false),
		fwd("TCP", 40000, &flow.TCPFlags{SYN: true, ACK: true}, true),
		fwd("TCP", 80, &flow.TCPFlags{FIN: true, ACK: true}, false),
		fwd("TCP", 30080, &flow.TCPFlags{SYN: true}, false),
		{Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_POLICY_DENIED", Protocol: "TCP", DstPort: 8080, TCPFlags: &flow.TCPFlags{SYN: true}},
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "ICMP", ICMPType: 8},
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "ICMP", ICMPType: 0, IsReply: true},
		{Type: flow.TypeDNS, Verdict: flow.Forwarded, Protocol: "UDP", DstPort: 53, DNS: &flow.DNS{Query: "web.x.svc.cluster.local.", QType: "A"}},
		{Type: flow.TypeDNS, Verdict: flow.Forwarded, Protocol: "UDP", SrcPort: 53, IsReply: true,
			DNS: &flow.DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NOERROR", IPs: []string{"10.96.0.10"}}},
		{Type: flow.TypeLost, Lost: 3},
	}
}

// observeEach counts each flow as a batch of its own.
func observeEach(s *Sink, fs []*flow.Flow) {
	for _, f := range fs {
		s.Observe([]flow.Flow{*f})
	}
}

// batchOf is fs as one batch.
func batchOf(fs []*flow.Flow) []flow.Flow {
	out := make([]flow.Flow, len(fs))
	for i, f := range fs {
		out[i] = *f
	}
	return out
}

// TestSinkCountsKnownFlows: the same counts whether the flows come one by one or as
// one batch (counted in the batch, added to the series when it is done).
func TestSinkCountsKnownFlows(t *testing.T) {
	one, batch := New(Families, Options{}), New(Families, Options{})
	observeEach(one, knownFlows())
	batch.Observe(batchOf(knownFlows()))
	want := `
# HELP hubble_flows_processed_total Flows processed, by event type (Trace, Drop, PolicyVerdict, L7), subtype (DNS for L7) and verdict.
# TYPE hubble_flows_processed_total counter
hubble_flows_processed_total{subtype="",type="Drop",verdict="DROPPED"} 1
hubble_flows_processed_total{subtype="",type="Trace",verdict="FORWARDED"} 6
hubble_flows_processed_total{subtype="DNS",type="L7",verdict="FORWARDED"} 2
# HELP hubble_drop_total Dropped flows, by drop reason (the datapath's reason without DROP_) and protocol.
# TYPE hubble_drop_total counter
hubble_drop_total{protocol="TCP",reason="POLICY_DENIED"} 1
# HELP hubble_tcp_flags_total Forwarded TCP flows by flag (SYN, SYN-ACK, FIN, RST) and IP family.
# TYPE hubble_tcp_flags_total counter
hubble_tcp_flags_total{family="IPv4",flag="FIN"} 1
hubble_tcp_flags_total{family="IPv4",flag="SYN"} 2
hubble_tcp_flags_total{family="IPv4",flag="SYN-ACK"} 1
# HELP hubble_icmp_total ICMP flows by IP family and ICMP type.
# TYPE hubble_icmp_total counter
hubble_icmp_total{family="IPv4",type="EchoReply"} 1
hubble_icmp_total{family="IPv4",type="EchoRequest"} 1
# HELP hubble_port_distribution_total Forwarded flows to a destination port, by protocol and port; ports beyond the first tracked ones are counted as port "other".
# TYPE hubble_port_distribution_total counter
hubble_port_distribution_total{port="30080",protocol="TCP"} 1
hubble_port_distribution_total{port="80",protocol="TCP"} 2
# HELP hubble_dns_queries_total DNS queries seen on UDP/53, by rcode (empty), query type and answers returned (0).
# TYPE hubble_dns_queries_total counter
hubble_dns_queries_total{ips_returned="0",qtypes="A",rcode=""} 1
# HELP hubble_dns_responses_total DNS responses seen on UDP/53, by rcode, query type and A/AAAA answers returned (10 or more: "10+").
# TYPE hubble_dns_responses_total counter
hubble_dns_responses_total{ips_returned="1",qtypes="A",rcode="NOERROR"} 1
`
	for name, s := range map[string]*Sink{"one by one": one, "one batch": batch} {
		if err := testutil.GatherAndCompare(s.Registry(), strings.NewReader(want)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	problems, err := testutil.GatherAndLint(one.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

func TestSinkOnlyEnabledFamilies(t *testing.T) {
	s := New([]string{FamilyDrop}, Options{})
	s.Observe(batchOf(knownFlows()))
	names, err := familyNames(s)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[hubble_drop_total]" {
		t.Errorf("families served with drop only: %v", names)
	}
}

func familyNames(s *Sink) ([]string, error) {
	mfs, err := s.Registry().Gather()
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names, err
}

// TestSinkPortsBounded: after PortsMax distinct high ports, new ones count as
// "other"; well-known ports and ports already tracked keep their own series.
func TestSinkPortsBounded(t *testing.T) {
	s := New([]string{FamilyPortDistribution}, Options{PortsMax: 3})
	var fs []flow.Flow
	for port := uint16(20000); port < 20010; port++ {
		fs = append(fs, flow.Flow{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP", DstPort: port})
	}
	s.Observe(fs[:4])
	s.Observe(fs[4:])
	s.Observe([]flow.Flow{
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP", DstPort: 20000},
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "UDP", DstPort: 443},
	})
	want := `
# HELP hubble_port_distribution_total Forwarded flows to a destination port, by protocol and port; ports beyond the first tracked ones are counted as port "other".
# TYPE hubble_port_distribution_total counter
hubble_port_distribution_total{port="20000",protocol="TCP"} 2
hubble_port_distribution_total{port="20001",protocol="TCP"} 1
hubble_port_distribution_total{port="20002",protocol="TCP"} 1
hubble_port_distribution_total{port="other",protocol="TCP"} 7
hubble_port_distribution_total{port="443",protocol="UDP"} 1
`
	if err := testutil.GatherAndCompare(s.Registry(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestParseFamilies(t *testing.T) {
	got, err := ParseFamilies("dns,drop,tcp,flow,icmp,port-distribution")
	if err != nil || fmt.Sprint(got) != fmt.Sprint(Families) {
		t.Errorf("default list: %v, %v", got, err)
	}
	if got, err := ParseFamilies(""); err != nil || got != nil {
		t.Errorf(`"": %v, %v`, got, err)
	}
	bad := map[string]string{
		"dns,http":             `"http" needs an L7 proxy`,
		"drop,bogus":           `unknown metric family "bogus"`,
		"dns:query;ignoreAAAA": "per-family options are not supported",
		"drop,drop":            `"drop" listed twice`,
	}
	for in, want := range bad {
		if _, err := ParseFamilies(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFamilies(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// Flows to ever new ephemeral ports (a server's FIN to each client port) share the
// "other" series without a counter cache entry each, so the cache keeps room for the
// other families' label sets.
func TestSinkOtherPortsShareOneCacheEntry(t *testing.T) {
	s := New([]string{FamilyPortDistribution, FamilyFlow}, Options{PortsMax: 3})
	var fs []flow.Flow
	for port := 20000; port < 30000; port++ {
		fs = append(fs, flow.Flow{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP", DstPort: uint16(port)})
	}
	s.Observe(fs)
	if n := len(s.counters.m); n > 3+2 {
		t.Errorf("counter cache holds %d label sets after 10,000 ports, want the 3 tracked ports, \"other\" and the flows series", n)
	}
	if got := testutil.ToFloat64(s.ports.WithLabelValues("TCP", "other")); got != 10000-3 {
		t.Errorf("other = %v, want %d", got, 10000-3)
	}
}

func BenchmarkSinkEphemeralPorts(b *testing.B) {
	s := New([]string{FamilyPortDistribution}, Options{})
	fs := []flow.Flow{{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP"}}
	b.ReportAllocs()
	port := 0
	for b.Loop() {
		fs[0].DstPort = uint16(1024 + port%60000)
		port++
		s.Observe(fs)
	}
}
