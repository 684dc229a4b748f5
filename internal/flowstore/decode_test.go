package flowstore

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/flow"
)

type fakeResolver struct{}

// clientLabels are shared, as the agent's resolver shares a pod's labels.
var clientLabels = map[string]string{"app": "client"}

// fakeClient is the one pod fakeResolver knows, shared by its flows.
var fakeClient = &flow.Endpoint{IP: "10.244.1.5", Namespace: "x", Pod: "client", Labels: clientLabels, Node: "n1"}

func (fakeResolver) Endpoint(ip netip.Addr) *flow.Endpoint {
	if ip == netip.AddrFrom4([4]byte{10, 244, 1, 5}) {
		return fakeClient
	}
	return nil
}

func (fakeResolver) Service(fe netip.AddrPort, proto uint8) string {
	if fe == netip.MustParseAddrPort("10.96.0.20:80") && proto == 6 {
		return "y/web"
	}
	return ""
}

func dnsQuery(t *testing.T) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("web.y.svc.cluster.local."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	if err := b.Question(q); err != nil {
		t.Fatal(err)
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConvert(t *testing.T) {
	now := time.Unix(100, 0)
	client, backend := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7")
	o := Origin{Node: "n1", HostRouting: "bpf"}
	src := flow.Endpoint{IP: "10.244.1.5", Namespace: "x", Pod: "client", Labels: map[string]string{"app": "client"}, Node: "n1"}
	dst := flow.Endpoint{IP: "10.244.2.7"}
	base := datapath.FlowRecord{Time: now, Reason: "FORWARDED", Direction: "from-pod", Src: client, Dst: backend, Proto: 6, SrcPort: 40000, DstPort: 8080}
	want := func(mod func(f *flow.Flow)) *flow.Flow {
		f := &flow.Flow{Time: now, Node: "n1", HostRouting: "bpf", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Direction: flow.Egress,
			Source: src, Destination: dst, Protocol: "TCP", SrcPort: 40000, DstPort: 8080}
		mod(f)
		return f
	}
	rec := func(mod func(r *datapath.FlowRecord)) datapath.FlowRecord {
		r := base
		mod(&r)
		return r
	}
	cases := []struct {
		name string
		rec  datapath.FlowRecord
		want *flow.Flow
	}{
		{"syn through a service", rec(func(r *datapath.FlowRecord) {
			r.Kind, r.TCPFlags, r.Service = datapath.FlowTCP, 0x02, netip.MustParseAddrPort("10.96.0.20:80")
		}), want(func(f *flow.Flow) { f.TCPFlags, f.Service = &flow.TCPFlags{SYN: true}, "y/web" })},
		{"syn-ack is a reply", rec(func(r *datapath.FlowRecord) { r.Kind, r.TCPFlags, r.Direction = datapath.FlowTCP, 0x12, "to-pod" }),
			want(func(f *flow.Flow) {
				f.TCPFlags, f.IsReply, f.Direction = &flow.TCPFlags{SYN: true, ACK: true}, true, flow.Ingress
			})},
		{"policy drop", rec(func(r *datapath.FlowRecord) {
			r.Kind, r.Reason, r.Direction, r.TCPFlags = datapath.FlowDrop, "DROP_POLICY_DENIED", "to-pod", 0x02
		}), want(func(f *flow.Flow) {
			f.Type, f.Verdict, f.DropReason, f.Direction, f.TCPFlags = flow.TypeDrop, flow.Dropped, "DROP_POLICY_DENIED", flow.Ingress, &flow.TCPFlags{SYN: true}
		})},
		{"udp summary", rec(func(r *datapath.FlowRecord) { r.Kind, r.Proto, r.Packets, r.Bytes = datapath.FlowSummary, 17, 9, 900 }),
			want(func(f *flow.Flow) { f.Protocol, f.Packets, f.Bytes = "UDP", 9, 900 })},
		{"icmp type and code", rec(func(r *datapath.FlowRecord) {
			r.Kind, r.Proto, r.SrcPort, r.DstPort = datapath.FlowNew, 1, 8<<8, 0x1234
		}),
			want(func(f *flow.Flow) { f.Protocol, f.ICMPType, f.SrcPort, f.DstPort = "ICMP", 8, 0, 0 })},
		{"dns query", rec(func(r *datapath.FlowRecord) {
			r.Kind, r.Proto, r.DstPort, r.Payload = datapath.FlowDNS, 17, 53, dnsQuery(t)
		}),
			want(func(f *flow.Flow) {
				f.Type, f.Protocol, f.DstPort, f.DNS = flow.TypeDNS, "UDP", 53, &flow.DNS{Query: "web.y.svc.cluster.local.", QType: "A"}
			})},
		{"dns payload that does not parse stays L3_L4", rec(func(r *datapath.FlowRecord) {
			r.Kind, r.Proto, r.DstPort, r.Payload = datapath.FlowDNS, 17, 53, []byte{1, 2}
		}), want(func(f *flow.Flow) { f.Protocol, f.DstPort = "UDP", 53 })},
	}
	for _, c := range cases {
		if got := Convert(c.rec, o, fakeResolver{}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}
