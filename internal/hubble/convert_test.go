package hubble

import (
	"reflect"
	"strings"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/myelin-net/myelin/internal/flow"
)

var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

func TestToProto(t *testing.T) {
	web := flow.Endpoint{IP: "10.244.1.5", Namespace: "x", Pod: "web", Labels: map[string]string{"app": "web", "tier": "fe"}, Identity: 300}
	client := flow.Endpoint{IP: "10.244.0.7", Namespace: "x", Pod: "client"}
	cases := []struct {
		name string
		in   flow.Flow
		want *flowpb.Flow
	}{
		{"tcp connection through a service",
			flow.Flow{Time: t0, Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Direction: flow.Egress, Source: client, Destination: web,
				Protocol: "TCP", SrcPort: 40000, DstPort: 80, TCPFlags: &flow.TCPFlags{SYN: true}, Service: "x/web", Policies: []string{"x/allow-web"}},
			&flowpb.Flow{Time: timestamppb.New(t0), NodeName: "n1", Verdict: flowpb.Verdict_FORWARDED, Type: flowpb.FlowType_L3_L4,
				TrafficDirection: flowpb.TrafficDirection_EGRESS, EventType: &flowpb.CiliumEventType{Type: 4},
				Source:      &flowpb.Endpoint{Namespace: "x", PodName: "client"},
				Destination: &flowpb.Endpoint{Namespace: "x", PodName: "web", Identity: 300, Labels: []string{"k8s:app=web", "k8s:tier=fe"}},
				IP:          &flowpb.IP{Source: "10.244.0.7", Destination: "10.244.1.5", IpVersion: flowpb.IPVersion_IPv4},
				L4:          &flowpb.Layer4{Protocol: &flowpb.Layer4_TCP{TCP: &flowpb.TCP{SourcePort: 40000, DestinationPort: 80, Flags: &flowpb.TCPFlags{SYN: true}}}},
				IsReply:     wrapperspb.Bool(false), DestinationService: &flowpb.Service{Namespace: "x", Name: "web"},
				EgressAllowedBy: []*flowpb.Policy{{Namespace: "x", Name: "allow-web", Kind: "NetworkPolicy"}}}},
		{"policy drop",
			flow.Flow{Time: t0, Node: "n2", Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_POLICY_DENIED", Direction: flow.Ingress,
				Source: client, Destination: web, Protocol: "UDP", SrcPort: 5000, DstPort: 53},
			&flowpb.Flow{Time: timestamppb.New(t0), NodeName: "n2", Verdict: flowpb.Verdict_DROPPED, Type: flowpb.FlowType_L3_L4,
				DropReason: 133, DropReasonDesc: flowpb.DropReason_POLICY_DENIED, Summary: "DROP_POLICY_DENIED",
				TrafficDirection: flowpb.TrafficDirection_INGRESS, EventType: &flowpb.CiliumEventType{Type: 1, SubType: 133},
				Source:      &flowpb.Endpoint{Namespace: "x", PodName: "client"},
				Destination: &flowpb.Endpoint{Namespace: "x", PodName: "web", Identity: 300, Labels: []string{"k8s:app=web", "k8s:tier=fe"}},
				IP:          &flowpb.IP{Source: "10.244.0.7", Destination: "10.244.1.5", IpVersion: flowpb.IPVersion_IPv4},
				L4:          &flowpb.Layer4{Protocol: &flowpb.Layer4_UDP{UDP: &flowpb.UDP{SourcePort: 5000, DestinationPort: 53}}},
				IsReply:     wrapperspb.Bool(false)}},
		{"ipv6 icmp reply with an unknown drop reason",
			flow.Flow{Time: t0, Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_SOMETHING_NEW", IsReply: true,
				Source: flow.Endpoint{IP: "fd00::1"}, Destination: flow.Endpoint{IP: "fd00::2"}, Protocol: "ICMP", ICMPType: 129},
			&flowpb.Flow{Time: timestamppb.New(t0), Verdict: flowpb.Verdict_DROPPED, Type: flowpb.FlowType_L3_L4, Summary: "DROP_SOMETHING_NEW",
				EventType: &flowpb.CiliumEventType{Type: 1}, Source: &flowpb.Endpoint{}, Destination: &flowpb.Endpoint{},
				IP: &flowpb.IP{Source: "fd00::1", Destination: "fd00::2", IpVersion: flowpb.IPVersion_IPv6},
				L4: &flowpb.Layer4{Protocol: &flowpb.Layer4_ICMPv6{ICMPv6: &flowpb.ICMPv6{Type: 129}}}, IsReply: wrapperspb.Bool(true)}},
		{"dns response",
			flow.Flow{Time: t0, Type: flow.TypeDNS, Verdict: flow.Forwarded, Source: web, Destination: client, Protocol: "UDP", SrcPort: 53, DstPort: 4000,
				DNS: &flow.DNS{Query: "web.x.svc.cluster.local.", QType: "A", Response: true, RCode: "NXDOMAIN"}},
			&flowpb.Flow{Time: timestamppb.New(t0), Verdict: flowpb.Verdict_FORWARDED, Type: flowpb.FlowType_L7, EventType: &flowpb.CiliumEventType{Type: 129},
				Source:      &flowpb.Endpoint{Namespace: "x", PodName: "web", Identity: 300, Labels: []string{"k8s:app=web", "k8s:tier=fe"}},
				Destination: &flowpb.Endpoint{Namespace: "x", PodName: "client"},
				IP:          &flowpb.IP{Source: "10.244.1.5", Destination: "10.244.0.7", IpVersion: flowpb.IPVersion_IPv4},
				L4:          &flowpb.Layer4{Protocol: &flowpb.Layer4_UDP{UDP: &flowpb.UDP{SourcePort: 53, DestinationPort: 4000}}},
				IsReply:     wrapperspb.Bool(false),
				L7: &flowpb.Layer7{Type: flowpb.L7FlowType_RESPONSE, Record: &flowpb.Layer7_Dns{Dns: &flowpb.DNS{
					Query: "web.x.svc.cluster.local.", Rcode: 3, Qtypes: []string{"A"}, ObservationSource: "myelin"}}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ToProto(&c.in)
			if !proto.Equal(got, c.want) {
				t.Errorf("ToProto:\n got  %s\n want %s", protojson.Format(got), protojson.Format(c.want))
			}
		})
	}
}

func TestResponseLost(t *testing.T) {
	r := Response(&flow.Flow{Time: t0, Node: "n1", Type: flow.TypeLost, Lost: 17})
	le := r.GetLostEvents()
	if le == nil || le.GetNumEventsLost() != 17 || le.GetSource() != flowpb.LostEventSource_HUBBLE_RING_BUFFER || r.GetNodeName() != "n1" {
		t.Errorf("Response(lost 17) = %v: want lost_events of 17 from the hubble ring buffer on n1", r)
	}
	if f := Response(&flow.Flow{Time: t0, Node: "n1", Type: flow.TypeL3L4}).GetFlow(); f == nil || f.GetNodeName() != "n1" {
		t.Errorf("Response(L3_L4) has no flow: %v", f)
	}
}

func TestResponseValidUTF8(t *testing.T) {
	bad := "x\xff\xfe"
	ep := flow.Endpoint{IP: "10.244.0.7", Namespace: bad, Pod: bad, Labels: map[string]string{bad: bad}}
	cases := []flow.Flow{
		{Time: t0, Node: bad, Type: flow.TypeDNS, Verdict: flow.Forwarded, Source: ep, Destination: ep, Protocol: "UDP", DstPort: 53,
			Service: bad + "/" + bad, Policies: []string{bad + "/" + bad},
			DNS: &flow.DNS{Query: bad, QType: bad, Response: true, RCode: bad, IPs: []string{bad}}},
		{Time: t0, Node: bad, Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: bad, Source: ep, Destination: ep},
		{Time: t0, Node: bad, Type: flow.TypeLost, Lost: 1},
	}
	for _, f := range cases {
		r := Response(&f)
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatalf("marshal the response to a %s flow with strings that are not UTF-8: %v", f.Type, err)
		}
		if r.GetNodeName() != "x\uFFFD" {
			t.Errorf("node name %q, want %q", r.GetNodeName(), "x\uFFFD")
		}
		if f.Type == flow.TypeDNS {
			var got observerpb.GetFlowsResponse
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if q := got.GetFlow().GetL7().GetDns().GetQuery(); q != "x\uFFFD" {
				t.Errorf("DNS query %q, want %q", q, "x\uFFFD")
			}
		}
	}
}

// validText looks at every string a flow holds: each string field of flow.Flow and
// of what it holds (endpoints, labels, DNS, lists), set alone to bytes that are not
// UTF-8, makes it false. A string field added to a flow later fails here until
// validText checks it too (else Response would skip the walk that repairs it).
func TestValidTextCoversEveryString(t *testing.T) {
	const bad = "x\xff"
	var fields []string
	var visit func(v reflect.Value, path string)
	visit = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.String:
			fields = append(fields, path)
			f := &flow.Flow{DNS: &flow.DNS{IPs: []string{""}}, Policies: []string{""},
				Source: flow.Endpoint{Labels: map[string]string{"k": "v"}}}
			setAt(reflect.ValueOf(f).Elem(), path, bad)
			if validText(f) {
				t.Errorf("validText is true with %s = %q", path, bad)
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					visit(v.Field(i), path+"."+v.Type().Field(i).Name)
				}
			}
		case reflect.Pointer:
			visit(reflect.Zero(v.Type().Elem()), path)
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.String {
				visit(reflect.Zero(v.Type().Elem()), path+"[0]")
			}
		case reflect.Map:
			visit(reflect.Zero(v.Type().Key()), path+"{key}")
			visit(reflect.Zero(v.Type().Elem()), path+"{value}")
		}
	}
	visit(reflect.ValueOf(flow.Flow{}), "")
	if len(fields) < 15 {
		t.Fatalf("only %d string fields found: %v", len(fields), fields)
	}
}

// setAt sets the string at path (as TestValidTextCoversEveryString names it) in v
// to s, through pointers (allocated when nil), slices' first element and maps'
// single key or value.
func setAt(v reflect.Value, path, s string) {
	part, rest, _ := strings.Cut(strings.TrimPrefix(path, "."), ".")
	name, suffix, _ := strings.Cut(part, "[")
	if i := strings.Index(name, "{"); i >= 0 {
		name, suffix = name[:i], name[i:]
	}
	fv := v.FieldByName(name)
	if fv.Kind() == reflect.Pointer {
		if fv.IsNil() {
			fv.Set(reflect.New(fv.Type().Elem()))
		}
		fv = fv.Elem()
	}
	switch {
	case suffix == "0]":
		fv.Index(0).SetString(s)
	case suffix == "{key}" || suffix == "{value}":
		m := reflect.MakeMap(fv.Type())
		if suffix == "{key}" {
			m.SetMapIndex(reflect.ValueOf(s), reflect.ValueOf("v"))
		} else {
			m.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf(s))
		}
		fv.Set(m)
	case rest != "":
		setAt(fv, "."+rest, s)
	default:
		fv.SetString(s)
	}
}
