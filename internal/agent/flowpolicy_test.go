package agent

import (
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/policy"
)

func TestFlowPolicyVerdict(t *testing.T) {
	client := policy.Pod{Namespace: "x", Name: "client", Labels: map[string]string{"app": "client"}, IP: netip.MustParseAddr("10.244.1.5"), Node: "n1"}
	server := policy.Pod{Namespace: "x", Name: "server", Labels: map[string]string{"app": "server"}, IP: netip.MustParseAddr("10.244.1.6"), Node: "n1"}
	allow := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "allow-client"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		},
	}
	pol := &policyLoop{}
	in := policy.Input{Node: "n1", Pods: []policy.Pod{client, server}, Namespaces: map[string]map[string]string{"x": {}},
		Policies: []*networkingv1.NetworkPolicy{allow}}
	pol.view.Store(&policyView{
		input: in, tracer: policy.NewTracer(in),
		state: policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
			server.IP: {Pod: "x/server", IP: server.IP, IngressPolicies: []string{"x/allow-client"}},
		}},
	})
	l := &flowLoop{}
	l.pol.Store(pol)
	syn := &flow.Record{Type: flow.TypeL3L4, Direction: flow.Ingress, Proto: 6, DstPort: 80,
		SrcIP: [4]byte{10, 244, 1, 5}, DstIP: [4]byte{10, 244, 1, 6}, TCPFlags: flow.TCPFlagSYN}
	var pv flow.Record
	if !l.PolicyVerdict(syn, &pv) || pv.Type != flow.TypePolicyVerdict || pv.Verdict() != flow.Forwarded || len(pv.Policies) != 1 || pv.Policies[0] != "x/allow-client" {
		t.Errorf("SYN into an isolated pod: %+v, want a FORWARDED policy verdict by x/allow-client", pv)
	}
	ack := *syn
	ack.TCPFlags = flow.TCPFlagSYN | flow.TCPFlagACK
	if l.PolicyVerdict(&ack, &pv) {
		t.Errorf("SYN-ACK: %+v, want none", pv)
	}
	egress := *syn
	egress.Direction = flow.Egress // the client is not isolated for egress
	if l.PolicyVerdict(&egress, &pv) {
		t.Errorf("egress of a pod no policy isolates: %+v, want none", pv)
	}
	drop := *syn
	drop.Type, drop.DropReason = flow.TypeDrop, "DROP_POLICY_DENIED"
	if pv = (flow.Record{}); !l.PolicyVerdict(&drop, &pv) || pv.Verdict() != flow.Dropped || len(pv.Policies) != 0 {
		t.Errorf("policy drop: %+v, want a DROPPED policy verdict without policies", pv)
	}
}
