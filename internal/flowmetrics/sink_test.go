package flowmetrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/myelin-net/myelin/internal/flow"
)

// knownRecords is a small day on a node, as the agent stores it: a TCP connection
// to a web pod (SYN, SYN-ACK reply, FIN), a policy drop, a NodePort flow, a ping, a
// DNS query and its answer, and a reader's gap that is no flow (a whole Flow).
func knownRecords() []flow.Record {
	tcp := func(dport uint16, flags uint8) flow.Record {
		return flow.Record{Type: flow.TypeL3L4, Proto: 6, SrcPort: 40000, DstPort: dport, TCPFlags: flags}
	}
	const syn, ack, fin = flow.TCPFlagSYN, flow.TCPFlagACK, flow.TCPFlagFIN
	return []flow.Record{
		tcp(80, syn),
		tcp(40000, syn|ack),
		tcp(80, fin|ack),
		tcp(30080, syn),
		{Type: flow.TypeDrop, DropReason: "DROP_POLICY_DENIED", Proto: 6, DstPort: 8080, TCPFlags: syn},
		{Type: flow.TypeL3L4, Proto: 1, SrcPort: 8 << 8},
		{Type: flow.TypeL3L4, Proto: 1},
		{Type: flow.TypeDNS, Proto: 17, DstPort: 53, DNS: &flow.DNS{Query: "web.x.svc.cluster.local.", QType: "A"}},
		{Type: flow.TypeDNS, Proto: 17, SrcPort: 53,
			DNS: &flow.DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NOERROR", IPs: []string{"10.96.0.10"}}},
		flow.Whole(&flow.Flow{Type: flow.TypeLost, Lost: 3}),
	}
}

// observeEach counts each record as a batch of its own.
func observeEach(s *Sink, rs []flow.Record) {
	for i := range rs {
		s.Observe(rs[i : i+1])
	}
}

// asFlows are rs made whole Flows (Record.Into), as a Flow added to the store is kept.
func asFlows(rs []flow.Record) []flow.Record {
	out := make([]flow.Record, len(rs))
	for i := range rs {
		f := new(flow.Flow)
		rs[i].Into(f, "n1", "bpf")
		out[i] = flow.Whole(f)
	}
	return out
}

// wholes are fs as whole Records.
func wholes(fs []flow.Flow) []flow.Record {
	out := make([]flow.Record, len(fs))
	for i := range fs {
		out[i] = flow.Whole(&fs[i])
	}
	return out
}

// TestSinkCountsKnownFlows: the same counts whether the records come one by one or
// as one batch (counted in the batch, added to the series when it is done), and
// whether they are counted as the agent stores them (by their numbers) or as the
// Flows they stand for.
func TestSinkCountsKnownFlows(t *testing.T) {
	one, batch, flows := New(Families, Options{}), New(Families, Options{}), New(Families, Options{})
	observeEach(one, knownRecords())
	batch.Observe(knownRecords())
	flows.Observe(asFlows(knownRecords()))
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
	for name, s := range map[string]*Sink{"one by one": one, "one batch": batch, "as flows": flows} {
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
	s.Observe(knownRecords())
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
	s.Observe(wholes(fs[:4]))
	s.Observe(wholes(fs[4:]))
	s.Observe(wholes([]flow.Flow{
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP", DstPort: 20000},
		{Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "UDP", DstPort: 443},
	}))
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
// "other" series without keeping anything per port.
func TestSinkOtherPortsKeepNothingEach(t *testing.T) {
	s := New([]string{FamilyPortDistribution, FamilyFlow}, Options{PortsMax: 3})
	var rs []flow.Record
	for port := 20000; port < 30000; port++ {
		rs = append(rs, flow.Record{Type: flow.TypeL3L4, Proto: 6, DstPort: uint16(port)})
	}
	s.Observe(rs)
	if n := len(s.ports); n != 3 {
		t.Errorf("%d ports kept after 10,000 ports, want the 3 tracked", n)
	}
	if got := testutil.ToFloat64(s.portDist.WithLabelValues("TCP", "other")); got != 10000-3 {
		t.Errorf("other = %v, want %d", got, 10000-3)
	}
}

func BenchmarkSinkEphemeralPorts(b *testing.B) {
	s := New([]string{FamilyPortDistribution}, Options{})
	rs := []flow.Record{{Type: flow.TypeL3L4, Proto: 6}}
	b.ReportAllocs()
	port := 0
	for b.Loop() {
		rs[0].DstPort = uint16(1024 + port%60000)
		port++
		s.Observe(rs)
	}
}
