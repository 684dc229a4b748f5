package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/policy"
)

// A pod's flows carry all its labels up to flowLabelsMax, else the first
// flowLabelsMax by key, the same map for every flow of one view: one tenant's pod
// with thousands of labels can't make each of its flows megabytes long.
func TestFlowLabelsBounded(t *testing.T) {
	big := map[string]string{}
	for i := range 13000 {
		big[fmt.Sprintf("k%05d", i)] = "v"
	}
	small := map[string]string{"app": "web"}
	v := &policyView{input: policy.Input{Pods: []policy.Pod{
		{Namespace: "a", Name: "big", Labels: big, IP: netip.MustParseAddr("10.244.1.5")},
		{Namespace: "a", Name: "small", Labels: small, IP: netip.MustParseAddr("10.244.1.6")},
	}}}
	var x podIndex
	p, ok := x.in(v, netip.MustParseAddr("10.244.1.5"))
	if !ok {
		t.Fatal("pod not indexed")
	}
	got := x.flowLabels(p)
	if len(got) != flowLabelsMax || got["k00000"] != "v" || got[fmt.Sprintf("k%05d", flowLabelsMax-1)] != "v" {
		t.Fatalf("flow labels of a pod with 13,000: %d labels, want the first %d by key", len(got), flowLabelsMax)
	}
	if again := x.flowLabels(p); fmt.Sprintf("%p", again) != fmt.Sprintf("%p", got) {
		t.Error("the capped labels were made again for a second flow of the same view")
	}
	s, _ := x.in(v, netip.MustParseAddr("10.244.1.6"))
	if got := x.flowLabels(s); len(got) != 1 || got["app"] != "web" {
		t.Errorf("flow labels of a pod with one: %v", got)
	}
}

// A pod's flows share one Endpoint per policy view (flows keep it, never copy it);
// a new view (the pod relabelled) makes a new one, and flows stored before keep the
// old; an address of no pod has none.
func TestFlowEndpointsSharedPerView(t *testing.T) {
	ip := netip.MustParseAddr("10.244.1.5")
	view := func(app string) *policyView {
		return &policyView{input: policy.Input{Pods: []policy.Pod{
			{Namespace: "a", Name: "web", Labels: map[string]string{"app": app}, IP: ip, Node: "n1"},
		}}}
	}
	pol := &policyLoop{}
	pol.view.Store(view("v1"))
	var x podIndex
	first := x.endpoint(pol, ip)
	if first == nil || first.IP != "10.244.1.5" || first.Namespace != "a" || first.Pod != "web" || first.Node != "n1" || first.Labels["app"] != "v1" {
		t.Fatalf("endpoint %+v, want a/web on n1 with app=v1", first)
	}
	if again := x.endpoint(pol, ip); again != first {
		t.Error("a second flow of the same view got another Endpoint")
	}
	pol.view.Store(view("v2"))
	if next := x.endpoint(pol, ip); next == first || next.Labels["app"] != "v2" || first.Labels["app"] != "v1" {
		t.Errorf("after relabelling: %+v (first %+v), want a new Endpoint with app=v2 and the first unchanged", next, first)
	}
	if none := x.endpoint(pol, netip.MustParseAddr("10.244.9.9")); none != nil {
		t.Errorf("address of no pod: %+v, want nil", none)
	}
}
