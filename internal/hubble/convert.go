package hubble

import (
	"net/netip"
	"slices"
	"strings"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/myelin-net/myelin/internal/flow"
)

// Cilium's monitor message types, which Hubble reports as a flow's event_type.type and
// which `hubble observe --type` sends (drop=1, trace=4, policy-verdict=5, l7=129).
const (
	eventDrop          = 1
	eventTrace         = 4
	eventPolicyVerdict = 5
	eventL7            = 129
)

// dropReasons maps the datapath's reason names to the nearest Hubble drop reason;
// a name not listed is DROP_REASON_UNKNOWN (the name stays in the deprecated summary).
var dropReasons = map[string]flowpb.DropReason{
	"DROP_INVALID_PACKET":      flowpb.DropReason_INVALID_PACKET_DROPPED,
	"DROP_NO_ROUTE":            flowpb.DropReason_FIB_LOOKUP_FAILED,
	"DROP_TUNNEL_KEY":          flowpb.DropReason_ERROR_RETRIEVING_TUNNEL_KEY,
	"DROP_NAT_FULL":            flowpb.DropReason_NO_MAPPING_FOR_NAT_MASQUERADE,
	"DROP_NAT_NO_PORT":         flowpb.DropReason_NO_MAPPING_FOR_NAT_MASQUERADE,
	"DROP_NODEPORT_NAT_FULL":   flowpb.DropReason_NO_MAPPING_FOR_NAT_MASQUERADE,
	"DROP_SVC_NO_BACKEND":      flowpb.DropReason_SERVICE_BACKEND_NOT_FOUND,
	"DROP_SPOOFED_SOURCE":      flowpb.DropReason_INVALID_SOURCE_IP,
	"DROP_UNKNOWN_TUNNEL_PEER": flowpb.DropReason_NO_TUNNEL_OR_ENCAPSULATION_ENDPOINT,
	"DROP_FRAG_NO_FLOW":        flowpb.DropReason_FIRST_LOGICAL_DATAGRAM_FRAGMENT_NOT_FOUND,
	"DROP_SVC_CT_FULL":         flowpb.DropReason_CT_MAP_INSERTION_FAILED,
	"DROP_POLICY_DENIED":       flowpb.DropReason_POLICY_DENIED,
	"DROP_POLICY_MAP_FULL":     flowpb.DropReason_NO_CONFIGURATION_AVAILABLE_TO_PERFORM_POLICY_DECISION,
	"DROP_POLICY_CT_BUDGET":    flowpb.DropReason_CT_MAP_INSERTION_FAILED,
	"DROP_NAT_BUDGET":          flowpb.DropReason_NO_MAPPING_FOR_NAT_MASQUERADE,
	"DROP_SVC_CT_BUDGET":       flowpb.DropReason_CT_MAP_INSERTION_FAILED,
	"DROP_UNSUPPORTED_L3":      flowpb.DropReason_UNSUPPORTED_L3_PROTOCOL,
	"DROP_POD_TUNNEL":          flowpb.DropReason_ENCAPSULATION_TRAFFIC_IS_PROHIBITED,
}

// rcodes are the DNS rcode numbers of the names flow.ParseDNS reports.
var rcodes = map[string]uint32{"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMP": 4, "REFUSED": 5}

// Response wraps one flow as a GetFlowsResponse: a TypeLost record becomes a
// lost_events response, every other record a flow. Every string in it is valid
// UTF-8 (see validUTF8), so it can always be sent.
func Response(f *flow.Flow) *observerpb.GetFlowsResponse {
	r := &observerpb.GetFlowsResponse{NodeName: f.Node, Time: timestamppb.New(f.Time)}
	if f.Type == flow.TypeLost {
		r.ResponseTypes = &observerpb.GetFlowsResponse_LostEvents{LostEvents: &flowpb.LostEvent{
			Source: flowpb.LostEventSource_HUBBLE_RING_BUFFER, NumEventsLost: f.Lost}}
	} else {
		r.ResponseTypes = &observerpb.GetFlowsResponse_Flow{Flow: ToProto(f)}
	}
	if !validText(f) {
		validUTF8(r.ProtoReflect())
	}
	return r
}

// ToProto converts a flow to Hubble's flow message.
func ToProto(f *flow.Flow) *flowpb.Flow {
	p := &flowpb.Flow{
		Time:             timestamppb.New(f.Time),
		Verdict:          verdictProto(f.Verdict),
		Source:           endpointProto(f.Source),
		Destination:      endpointProto(f.Destination),
		Type:             flowpb.FlowType_L3_L4,
		NodeName:         f.Node,
		TrafficDirection: directionProto(f.Direction),
		EventType:        eventTypeProto(f),
		IP:               ipProto(f),
		L4:               l4Proto(f),
		IsReply:          wrapperspb.Bool(f.IsReply),
	}
	if f.Verdict == flow.Dropped {
		r := dropReasons[f.DropReason]
		p.DropReasonDesc = r
		p.DropReason = uint32(r) //nolint:staticcheck // deprecated, still printed by older clients
		p.Summary = f.DropReason //nolint:staticcheck // keeps myelin's own reason name visible
	}
	if ns, name, ok := strings.Cut(f.Service, "/"); ok {
		p.DestinationService = &flowpb.Service{Namespace: ns, Name: name}
	}
	if f.DNS != nil {
		p.Type = flowpb.FlowType_L7
		p.L7 = dnsProto(f.DNS)
	}
	for _, pol := range f.Policies {
		ns, name, _ := strings.Cut(pol, "/")
		pp := &flowpb.Policy{Namespace: ns, Name: name, Kind: "NetworkPolicy"}
		if f.Direction == flow.Egress {
			p.EgressAllowedBy = append(p.EgressAllowedBy, pp)
		} else {
			p.IngressAllowedBy = append(p.IngressAllowedBy, pp)
		}
	}
	return p
}

func verdictProto(v flow.Verdict) flowpb.Verdict {
	if n, ok := flowpb.Verdict_value[string(v)]; ok {
		return flowpb.Verdict(n)
	}
	return flowpb.Verdict_VERDICT_UNKNOWN
}

func directionProto(d flow.Direction) flowpb.TrafficDirection {
	switch d {
	case flow.Ingress:
		return flowpb.TrafficDirection_INGRESS
	case flow.Egress:
		return flowpb.TrafficDirection_EGRESS
	}
	return flowpb.TrafficDirection_TRAFFIC_DIRECTION_UNKNOWN
}

func eventTypeProto(f *flow.Flow) *flowpb.CiliumEventType {
	switch f.Type {
	case flow.TypeDrop:
		return &flowpb.CiliumEventType{Type: eventDrop, SubType: int32(dropReasons[f.DropReason])}
	case flow.TypePolicyVerdict:
		return &flowpb.CiliumEventType{Type: eventPolicyVerdict}
	case flow.TypeDNS:
		return &flowpb.CiliumEventType{Type: eventL7}
	}
	return &flowpb.CiliumEventType{Type: eventTrace}
}

// endpointProto names a pod's labels the way Cilium does ("k8s:key=value", sorted).
func endpointProto(e flow.Endpoint) *flowpb.Endpoint {
	p := &flowpb.Endpoint{Identity: e.Identity, Namespace: e.Namespace, PodName: e.Pod}
	for k, v := range e.Labels {
		p.Labels = append(p.Labels, "k8s:"+k+"="+v)
	}
	slices.Sort(p.Labels)
	return p
}

func ipProto(f *flow.Flow) *flowpb.IP {
	if f.Source.IP == "" && f.Destination.IP == "" {
		return nil
	}
	p := &flowpb.IP{Source: f.Source.IP, Destination: f.Destination.IP, IpVersion: flowpb.IPVersion_IPv4}
	if a, err := netip.ParseAddr(f.Source.IP); err == nil && a.Is6() && !a.Is4In6() {
		p.IpVersion = flowpb.IPVersion_IPv6
	}
	return p
}

func l4Proto(f *flow.Flow) *flowpb.Layer4 {
	src, dst := uint32(f.SrcPort), uint32(f.DstPort)
	six := strings.Contains(f.Source.IP, ":")
	switch strings.ToUpper(f.Protocol) {
	case "TCP":
		t := &flowpb.TCP{SourcePort: src, DestinationPort: dst}
		if fl := f.TCPFlags; fl != nil {
			t.Flags = &flowpb.TCPFlags{SYN: fl.SYN, ACK: fl.ACK, FIN: fl.FIN, RST: fl.RST, PSH: fl.PSH}
		}
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_TCP{TCP: t}}
	case "UDP":
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_UDP{UDP: &flowpb.UDP{SourcePort: src, DestinationPort: dst}}}
	case "SCTP":
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_SCTP{SCTP: &flowpb.SCTP{SourcePort: src, DestinationPort: dst}}}
	case "ICMP", "ICMPV4", "ICMPV6":
		t, c := uint32(f.ICMPType), uint32(f.ICMPCode)
		if six {
			return &flowpb.Layer4{Protocol: &flowpb.Layer4_ICMPv6{ICMPv6: &flowpb.ICMPv6{Type: t, Code: c}}}
		}
		return &flowpb.Layer4{Protocol: &flowpb.Layer4_ICMPv4{ICMPv4: &flowpb.ICMPv4{Type: t, Code: c}}}
	}
	return nil
}

func dnsProto(d *flow.DNS) *flowpb.Layer7 {
	l7 := &flowpb.Layer7{Type: flowpb.L7FlowType_REQUEST, Record: &flowpb.Layer7_Dns{Dns: &flowpb.DNS{
		Query: d.Query, Ips: d.IPs, Qtypes: []string{d.QType}, ObservationSource: "myelin"}}}
	if d.Response {
		l7.Type = flowpb.L7FlowType_RESPONSE
		l7.GetDns().Rcode = rcodes[d.RCode]
	}
	return l7
}
