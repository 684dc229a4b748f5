package agent

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/policy"
)

// serverView is a policy view in which x/server is isolated for ingress by one
// policy, name, allowing x/client on TCP port.
func serverView(name string, port int32) *policyView {
	client := policy.Pod{Namespace: "x", Name: "client", Labels: map[string]string{"app": "client"}, IP: netip.MustParseAddr("10.244.1.5"), Node: "n1"}
	server := policy.Pod{Namespace: "x", Name: "server", Labels: map[string]string{"app": "server"}, IP: netip.MustParseAddr("10.244.1.6"), Node: "n1"}
	p := intstr.FromInt32(port)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &p}},
			}},
		},
	}
	in := policy.Input{Node: "n1", Pods: []policy.Pod{client, server}, Namespaces: map[string]map[string]string{"x": {}},
		Policies: []*networkingv1.NetworkPolicy{np}}
	return &policyView{
		input: in, tracer: policy.NewTracer(in),
		state: policy.State{Endpoints: map[netip.Addr]*policy.Endpoint{
			server.IP: {Pod: "x/server", IP: server.IP, IngressPolicies: []string{"x/" + name}},
		}},
	}
}

func synTo(src string, sport, dport uint16) *flow.Record {
	return &flow.Record{Type: flow.TypeL3L4, Direction: flow.Ingress, Proto: 6, SrcPort: sport, DstPort: dport,
		SrcIP: netip.MustParseAddr(src).As4(), DstIP: [4]byte{10, 244, 1, 6}, TCPFlags: flow.TCPFlagSYN}
}

// TestFlowPolicyVerdictCache: new connections between the same pods on the same
// port are traced once per policy view; another port is traced on its own; a new
// view (a policy change) answers from the new policies; an address of no pod is
// not traced.
func TestFlowPolicyVerdictCache(t *testing.T) {
	pol := &policyLoop{}
	pol.view.Store(serverView("allow-80", 80))
	l := &flowLoop{}
	l.pol.Store(pol)
	policies := func(f *flow.Record) []string {
		t.Helper()
		var pv flow.Record
		if !l.PolicyVerdict(f, &pv) {
			t.Fatalf("%+v: no policy verdict", f)
		}
		return pv.Policies
	}
	for sport := uint16(40000); sport < 40010; sport++ {
		if got := policies(synTo("10.244.1.5", sport, 80)); !slices.Equal(got, []string{"x/allow-80"}) {
			t.Fatalf("SYN from port %d: policies %v, want [x/allow-80]", sport, got)
		}
	}
	if l.verdicts.traces != 1 {
		t.Errorf("10 connections of one pod pair and port: %d traces, want 1", l.verdicts.traces)
	}
	if got := policies(synTo("10.244.1.5", 40000, 443)); len(got) != 0 {
		t.Errorf("SYN to port 443: policies %v, want none", got)
	}
	if l.verdicts.traces != 2 {
		t.Errorf("after a second port: %d traces, want 2", l.verdicts.traces)
	}
	pol.view.Store(serverView("allow-443", 443))
	if got := policies(synTo("10.244.1.5", 40000, 443)); !slices.Equal(got, []string{"x/allow-443"}) {
		t.Errorf("SYN to port 443 after the policy change: policies %v, want [x/allow-443]", got)
	}
	if got := policies(synTo("10.244.1.5", 40000, 80)); len(got) != 0 {
		t.Errorf("SYN to port 80 after the policy change: policies %v, want none", got)
	}
	if l.verdicts.traces != 4 {
		t.Errorf("after the policy change: %d traces, want 4 (the cache starts over)", l.verdicts.traces)
	}
	if got := policies(synTo("10.244.9.9", 40000, 443)); len(got) != 0 || l.verdicts.traces != 4 {
		t.Errorf("SYN from an address of no pod: policies %v, %d traces, want none and 4", got, l.verdicts.traces)
	}
}

// TestPodIndexFollowsView: the index answers from the view it is asked about.
func TestPodIndexFollowsView(t *testing.T) {
	var x podIndex
	v1 := serverView("a", 80)
	v2 := serverView("b", 80)
	v2.input.Pods = v2.input.Pods[:1] // the server is gone
	ip := netip.MustParseAddr("10.244.1.6")
	if p, ok := x.in(v1, ip); !ok || p.Name != "server" {
		t.Errorf("view 1: %v %v, want x/server", p, ok)
	}
	if p, ok := x.in(v2, ip); ok {
		t.Errorf("view 2 without the server: %v, want none", p)
	}
}

// The reader traces at most traceBudget a second: past it, a connection the cache
// does not answer gets its verdict without the policies, until the second ends.
func TestFlowPolicyVerdictBudget(t *testing.T) {
	pol := &policyLoop{}
	pol.view.Store(serverView("allow-80", 80))
	l := &flowLoop{}
	l.pol.Store(pol)
	now := time.Unix(1000, 0)
	l.verdicts.now = func() time.Time { // every reading 20 ms later: a trace takes 20 ms
		now = now.Add(20 * time.Millisecond)
		return now
	}
	policies := func(dport uint16) []string {
		t.Helper()
		var pv flow.Record
		if !l.PolicyVerdict(synTo("10.244.1.5", 40000, dport), &pv) || pv.Type != flow.TypePolicyVerdict {
			t.Fatalf("port %d: %+v, want a policy verdict", dport, pv)
		}
		return pv.Policies
	}
	for dport := range uint16(3) { // 3 traces of 20 ms: the budget of 50 ms is spent
		policies(1000 + dport)
	}
	if got := policies(80); len(got) != 0 || l.verdicts.traces != 3 || l.verdicts.skipped.Load() != 1 {
		t.Errorf("port 80 past the budget: policies %v, %d traces, %d skipped; want none, 3 and 1", got, l.verdicts.traces, l.verdicts.skipped.Load())
	}
	now = now.Add(time.Second)
	if got := policies(80); !slices.Equal(got, []string{"x/allow-80"}) || l.verdicts.traces != 4 {
		t.Errorf("port 80 in the next second: policies %v, %d traces; want [x/allow-80] and 4", got, l.verdicts.traces)
	}
}

// BenchmarkPolicyVerdict is the flow reader's cost of a new connection's policy
// verdict, answered from the cache (every SYN into an isolated pod pays it, at every
// check that reports it): no allocation.
func BenchmarkPolicyVerdict(b *testing.B) {
	pol := &policyLoop{}
	pol.view.Store(serverView("allow-80", 80))
	l := &flowLoop{}
	l.pol.Store(pol)
	syn := synTo("10.244.1.5", 40000, 80)
	var pv flow.Record
	b.ReportAllocs()
	for b.Loop() {
		if !l.PolicyVerdict(syn, &pv) {
			b.Fatal("no policy verdict")
		}
	}
}

// BenchmarkPodIndex is the flow reader's lookup of a record's address among the
// policy view's pods (two per record).
func BenchmarkPodIndex(b *testing.B) {
	var x podIndex
	v := serverView("a", 80)
	ip := netip.MustParseAddr("10.244.1.6")
	for b.Loop() {
		if _, ok := x.in(v, ip); !ok {
			b.Fatal("not found")
		}
	}
}

// A tenant with many policies of long names allowing one connection gets flows
// naming the first flowPoliciesMax of them by name, whatever the listers' order,
// and the cache holds each name once, not once per answer.
func TestFlowPolicyVerdictNamesBounded(t *testing.T) {
	v := serverView("p", 80)
	base := v.input.Policies[0]
	long := strings.Repeat("x", 240)
	v.input.Policies = nil
	for _, i := range rand.Perm(40) {
		np := base.DeepCopy()
		np.Name = fmt.Sprintf("%s-%02d", long, i)
		v.input.Policies = append(v.input.Policies, np)
	}
	v.tracer = policy.NewTracer(v.input)
	pol := &policyLoop{}
	pol.view.Store(v)
	l := &flowLoop{}
	l.pol.Store(pol)
	var want []string
	for i := range flowPoliciesMax {
		want = append(want, fmt.Sprintf("x/%s-%02d", long, i))
	}
	var first []string
	for sport := range uint16(50) {
		var pv flow.Record
		// Another client port each time is the same question; another server port is a new one.
		if !l.PolicyVerdict(synTo("10.244.1.5", 40000+sport, 80), &pv) {
			t.Fatal("no policy verdict")
		}
		if !slices.Equal(pv.Policies, want) {
			t.Fatalf("policies %v, want the first %d by name", pv.Policies, flowPoliciesMax)
		}
		if first == nil {
			first = pv.Policies
		}
	}
	if len(l.verdicts.names) != flowPoliciesMax {
		t.Errorf("the cache holds %d names, want %d", len(l.verdicts.names), flowPoliciesMax)
	}
	if unsafe.StringData(first[0]) != unsafe.StringData(l.verdicts.names[want[0]]) {
		t.Error("an answer's name is not the copy the cache shares")
	}
}
