package hubble

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/myelin-net/myelin/internal/flow"
)

// The FlowFilters below are what `hubble observe` v1.18.4 sends for each flag
// (hubble/cmd/observe/flows_filter.go): --pod and --port become two ORed filters, one
// per side; --namespace becomes "ns/" pod prefixes.
func TestFilter(t *testing.T) {
	cases := []struct {
		flags string
		in    *flowpb.FlowFilter
		want  flow.Filter
	}{
		{"--from-pod x/client", &flowpb.FlowFilter{SourcePod: []string{"x/client"}}, flow.Filter{SourcePod: []string{"x/client"}}},
		{"--to-pod x/web (or the right half of --pod)", &flowpb.FlowFilter{DestinationPod: []string{"x/web"}}, flow.Filter{DestinationPod: []string{"x/web"}}},
		{"--namespace x (left half)", &flowpb.FlowFilter{SourcePod: []string{"x/"}}, flow.Filter{SourcePod: []string{"x/"}}},
		{"--verdict DROPPED --verdict FORWARDED", &flowpb.FlowFilter{Verdict: []flowpb.Verdict{flowpb.Verdict_DROPPED, flowpb.Verdict_FORWARDED}},
			flow.Filter{Verdict: []flow.Verdict{flow.Dropped, flow.Forwarded}}},
		{"--protocol TCP --protocol icmpv4", &flowpb.FlowFilter{Protocol: []string{"TCP", "icmpv4"}}, flow.Filter{Protocol: []string{"tcp", "icmp"}}},
		{"--to-service x/web", &flowpb.FlowFilter{DestinationService: []string{"x/web"}}, flow.Filter{DestinationService: []string{"x/web"}}},
		{"--type drop --type trace --type l7 --type policy-verdict", &flowpb.FlowFilter{EventType: []*flowpb.EventTypeFilter{{Type: 1}, {Type: 4}, {Type: 129}, {Type: 5}}},
			flow.Filter{Type: []flow.Type{flow.TypeDrop, flow.TypeL3L4, flow.TypeTrace, flow.TypeDNS, flow.TypePolicyVerdict}}},
		{"--type agent selects nothing myelin makes", &flowpb.FlowFilter{EventType: []*flowpb.EventTypeFilter{{Type: 130}}}, flow.Filter{Type: []flow.Type{"CILIUM_EVENT_130"}}},
		{"--port 80 (left half)", &flowpb.FlowFilter{SourcePort: []string{"80"}}, flow.Filter{Port: []uint16{80}}},
		{"--to-port 53", &flowpb.FlowFilter{DestinationPort: []string{"53"}}, flow.Filter{Port: []uint16{53}}},
		{"--node-name n1 --traffic-direction ingress", &flowpb.FlowFilter{NodeName: []string{"n1"}, TrafficDirection: []flowpb.TrafficDirection{flowpb.TrafficDirection_INGRESS}},
			flow.Filter{Node: []string{"n1"}, Direction: []flow.Direction{flow.Ingress}}},
		{"--ip 10.244.0.0/16 (both halves in one)", &flowpb.FlowFilter{SourceIp: []string{"10.244.0.0/16"}, DestinationIp: []string{"10.96.0.10"}},
			flow.Filter{SourceIP: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, DestinationIP: []netip.Prefix{netip.MustParsePrefix("10.96.0.10/32")}}},
	}
	for _, c := range cases {
		t.Run(c.flags, func(t *testing.T) {
			got, err := Filter(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Filter(%v) = %+v, want %+v", c.in, got, c.want)
			}
		})
	}
}

func TestFilterRejects(t *testing.T) {
	cases := []struct {
		name string
		in   *flowpb.FlowFilter
		want []string // all in the error
	}{
		{"label", &flowpb.FlowFilter{SourceLabel: []string{"app=web"}}, []string{"source_label", "--label", "not supported"}},
		{"http", &flowpb.FlowFilter{HttpStatusCode: []string{"200"}}, []string{"http_status_code", "--http-status"}},
		{"bad port", &flowpb.FlowFilter{DestinationPort: []string{"http"}}, []string{`port "http"`, "1-65535"}},
		{"port out of range", &flowpb.FlowFilter{SourcePort: []string{"70000"}}, []string{`port "70000"`}},
		{"l7 protocol", &flowpb.FlowFilter{Protocol: []string{"http"}}, []string{`protocol "http"`, "tcp, udp"}},
		{"malformed source IP", &flowpb.FlowFilter{SourceIp: []string{"web-1"}}, []string{`source_ip "web-1"`, "not an IP address or CIDR"}},
		{"malformed destination CIDR", &flowpb.FlowFilter{DestinationIp: []string{"10.0.0.0/40"}}, []string{`destination_ip "10.0.0.0/40"`, "not a CIDR"}},
		{"sub-type", &flowpb.FlowFilter{EventType: []*flowpb.EventTypeFilter{{Type: 4, MatchSubType: true, SubType: 3}}}, []string{"event type 4:3", "sub-type"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Filter(c.in)
			if err == nil {
				t.Fatalf("Filter(%v): no error", c.in)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Filter(%v) error %q: want it to say %q", c.in, err, w)
				}
			}
		})
	}
}

func TestRequest(t *testing.T) {
	req := &observerpb.GetFlowsRequest{Number: 20, Follow: true, Since: timestamppb.New(t0),
		Whitelist: []*flowpb.FlowFilter{{SourcePod: []string{"x/web"}}, {DestinationPod: []string{"x/web"}}},
		Blacklist: []*flowpb.FlowFilter{{Protocol: []string{"udp"}}}}
	got, err := Request(req)
	if err != nil {
		t.Fatal(err)
	}
	want := flow.Request{Last: 20, Follow: true, Since: t0,
		Whitelist: []flow.Filter{{SourcePod: []string{"x/web"}}, {DestinationPod: []string{"x/web"}}},
		Blacklist: []flow.Filter{{Protocol: []string{"udp"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Request = %+v, want %+v", got, want)
	}
	_, err = Request(&observerpb.GetFlowsRequest{Blacklist: []*flowpb.FlowFilter{{}, {DnsQuery: []string{"x"}}}})
	if err == nil || !strings.Contains(err.Error(), "blacklist filter 1") || !strings.Contains(err.Error(), "dns_query") {
		t.Errorf("Request with a dns_query blacklist: err %v, want one naming blacklist filter 1 and dns_query", err)
	}
	if _, err := Request(&observerpb.GetFlowsRequest{First: true}); err == nil || !strings.Contains(err.Error(), "--first") {
		t.Errorf("Request(first): err %v, want one naming --first", err)
	}
}
