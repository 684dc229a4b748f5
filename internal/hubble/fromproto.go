package hubble

import (
	"slices"
	"strings"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"

	"github.com/myelin-net/myelin/internal/flow"
)

// FromResponse is the flow a GetFlowsResponse carries: its flow, or a TypeLost record
// for lost events; nil for anything else (node status).
func FromResponse(r *observerpb.GetFlowsResponse) *flow.Flow {
	if l := r.GetLostEvents(); l != nil {
		return &flow.Flow{Time: r.GetTime().AsTime(), Node: r.GetNodeName(), Type: flow.TypeLost,
			Lost: l.GetNumEventsLost()}
	}
	p := r.GetFlow()
	if p == nil {
		return nil
	}
	f := FromProto(p)
	if f.Node == "" {
		f.Node = r.GetNodeName()
	}
	return f
}

// FromProto converts Hubble's flow message to a flow (the inverse of ToProto, for the
// fields Hubble carries: not Packets, Bytes, HostRouting nor an endpoint's node).
func FromProto(p *flowpb.Flow) *flow.Flow {
	f := &flow.Flow{
		Time: p.GetTime().AsTime(), Node: p.GetNodeName(), Verdict: flow.Verdict(p.GetVerdict().String()),
		Source: endpointFrom(p.GetSource(), p.GetIP().GetSource()), Destination: endpointFrom(p.GetDestination(), p.GetIP().GetDestination()),
		IsReply: p.GetIsReply().GetValue(),
	}
	switch p.GetTrafficDirection() {
	case flowpb.TrafficDirection_INGRESS:
		f.Direction = flow.Ingress
	case flowpb.TrafficDirection_EGRESS:
		f.Direction = flow.Egress
	}
	f.Type = typeFrom(p)
	if f.Verdict == flow.Dropped {
		f.DropReason = dropReasonFrom(p)
	}
	if s := p.GetDestinationService(); s != nil && s.GetName() != "" {
		f.Service = s.GetNamespace() + "/" + s.GetName()
	}
	pols := slices.Concat(p.GetEgressAllowedBy(), p.GetIngressAllowedBy()) // never into the message's own array
	for _, pol := range pols[:min(len(pols), FlowPoliciesMax)] {           // a hostile server's million
		f.Policies = append(f.Policies, pol.GetNamespace()+"/"+pol.GetName())
	}
	l4From(f, p.GetL4())
	if d := p.GetL7().GetDns(); d != nil {
		f.DNS = &flow.DNS{Query: d.GetQuery(), IPs: d.GetIps(), Response: p.GetL7().GetType() == flowpb.L7FlowType_RESPONSE}
		if q := d.GetQtypes(); len(q) > 0 {
			f.DNS.QType = q[0]
		}
		if f.DNS.Response {
			f.DNS.RCode = rcodeName(d.GetRcode())
		}
	}
	return f
}

func typeFrom(p *flowpb.Flow) flow.Type {
	switch p.GetEventType().GetType() {
	case eventDrop:
		return flow.TypeDrop
	case eventPolicyVerdict:
		return flow.TypePolicyVerdict
	case eventL7:
		if p.GetL7().GetDns() != nil {
			return flow.TypeDNS
		}
	}
	if p.GetVerdict() == flowpb.Verdict_TRACED {
		return flow.TypeTrace
	}
	return flow.TypeL3L4
}

// dropReasonFrom is myelin's reason name: the summary a myelin server puts it in, or
// the datapath name nearest Hubble's reason.
func dropReasonFrom(p *flowpb.Flow) string {
	if s := p.GetSummary(); strings.HasPrefix(s, "DROP_") { //nolint:staticcheck // where myelin's server keeps the name
		return s
	}
	for name, r := range dropReasons {
		if r == p.GetDropReasonDesc() && r != flowpb.DropReason_NO_MAPPING_FOR_NAT_MASQUERADE {
			return name
		}
	}
	return p.GetDropReasonDesc().String()
}

func endpointFrom(e *flowpb.Endpoint, ip string) flow.Endpoint {
	out := flow.Endpoint{IP: ip, Namespace: e.GetNamespace(), Pod: e.GetPodName(), Identity: e.GetIdentity()}
	for _, l := range e.GetLabels()[:min(len(e.GetLabels()), FlowLabelsMax)] { // a hostile server's million
		k, v, _ := strings.Cut(strings.TrimPrefix(l, "k8s:"), "=")
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		out.Labels[k] = v
	}
	return out
}

func l4From(f *flow.Flow, l *flowpb.Layer4) {
	switch {
	case l.GetTCP() != nil:
		t := l.GetTCP()
		f.Protocol, f.SrcPort, f.DstPort = "TCP", uint16(t.GetSourcePort()), uint16(t.GetDestinationPort())
		if fl := t.GetFlags(); fl != nil {
			f.TCPFlags = &flow.TCPFlags{SYN: fl.GetSYN(), ACK: fl.GetACK(), FIN: fl.GetFIN(), RST: fl.GetRST(), PSH: fl.GetPSH()}
		}
	case l.GetUDP() != nil:
		f.Protocol, f.SrcPort, f.DstPort = "UDP", uint16(l.GetUDP().GetSourcePort()), uint16(l.GetUDP().GetDestinationPort())
	case l.GetSCTP() != nil:
		f.Protocol, f.SrcPort, f.DstPort = "SCTP", uint16(l.GetSCTP().GetSourcePort()), uint16(l.GetSCTP().GetDestinationPort())
	case l.GetICMPv4() != nil:
		f.Protocol, f.ICMPType, f.ICMPCode = "ICMP", uint8(l.GetICMPv4().GetType()), uint8(l.GetICMPv4().GetCode())
	case l.GetICMPv6() != nil:
		f.Protocol, f.ICMPType, f.ICMPCode = "ICMPv6", uint8(l.GetICMPv6().GetType()), uint8(l.GetICMPv6().GetCode())
	}
}

func rcodeName(n uint32) string {
	for name, v := range rcodes {
		if v == n {
			return name
		}
	}
	return ""
}
