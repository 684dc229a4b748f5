package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

func TestParsePolicyPort(t *testing.T) {
	for in, want := range map[string]struct {
		proto uint8
		port  uint16
	}{"80/TCP": {policy.ProtoTCP, 80}, "53/udp": {policy.ProtoUDP, 53}, "9000/SCTP": {policy.ProtoSCTP, 9000}, "443": {policy.ProtoTCP, 443}} {
		proto, port, err := parsePolicyPort(in)
		if err != nil || proto != want.proto || port != want.port {
			t.Errorf("parsePolicyPort(%q) = %d %d %v, want %d %d", in, proto, port, err, want.proto, want.port)
		}
	}
	for _, bad := range []string{"", "0/TCP", "70000/TCP", "80/ICMP", "http"} {
		if _, _, err := parsePolicyPort(bad); err == nil {
			t.Errorf("parsePolicyPort(%q) accepted", bad)
		}
	}
}

// The trace route answers from the last computation's input, naming the
// allowing policy, and says what is wrong with bad input.
func TestHandlePolicyTrace(t *testing.T) {
	a := policy.Pod{Namespace: "x", Name: "a", Labels: map[string]string{"pod": "a"}, IP: netip.MustParseAddr("10.244.0.10"), Node: "n1"}
	b := policy.Pod{Namespace: "x", Name: "b", Labels: map[string]string{"pod": "b"}, IP: netip.MustParseAddr("10.244.0.11"), Node: "n1"}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "a-from-b"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}}}}}}}
	in := policy.Input{Node: "n1", Pods: []policy.Pod{a, b}, Policies: []*networkingv1.NetworkPolicy{np}}
	srv := &server{cfg: Config{Node: "n1"}}
	pl := &policyLoop{}
	pl.view.Store(&policyView{input: in, state: policy.Compute(in, policy.NewIdentities()), tracer: policy.NewTracer(in)})
	srv.views.add(pl)
	get := func(q string) (int, api.PolicyTrace) {
		rec := httptest.NewRecorder()
		srv.handlePolicyTrace(rec, httptest.NewRequest(http.MethodGet, "/v1/policy/trace?"+q, nil))
		var tr api.PolicyTrace
		_ = json.Unmarshal(rec.Body.Bytes(), &tr)
		return rec.Code, tr
	}
	if code, tr := get("from=x/b&to=x/a&port=80/TCP"); code != 200 || !tr.Allowed || len(tr.Ingress.By) != 1 || tr.Ingress.By[0] != "x/a-from-b" {
		t.Errorf("x/b -> x/a: %d %+v, want allowed by x/a-from-b", code, tr)
	}
	if code, tr := get("from=x/a&to=x/a&port=80/TCP"); code != 200 || tr.Allowed {
		t.Errorf("x/a -> x/a: %d %+v, want denied", code, tr)
	}
	if code, _ := get("from=x/nope&to=x/a&port=80/TCP"); code != http.StatusNotFound {
		t.Errorf("unknown pod: %d, want 404", code)
	}
	if code, _ := get("from=x/b&to=x/a&port=eighty"); code != http.StatusBadRequest {
		t.Errorf("bad port: %d, want 400", code)
	}
	rec := httptest.NewRecorder()
	srv.handlePolicy(rec, httptest.NewRequest(http.MethodGet, "/v1/policy", nil))
	var st api.PolicyStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Endpoints) != 2 || st.Endpoints[0].Pod != "x/a" || st.Endpoints[0].Ingress != "on" {
		t.Errorf("/v1/policy = %+v %v, want x/a ingress on", st, err)
	}
}

// A pod over its share of the connection table is named, with the reason its new
// connections drop, in /v1/policy (its endpoint) and in the status warnings.
func TestPolicyStatusShowsPodsOverBudget(t *testing.T) {
	a := policy.Pod{Namespace: "x", Name: "a", Labels: map[string]string{"pod": "a"}, IP: netip.MustParseAddr("10.244.0.10"), Node: "n1"}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	// r is a pod of another node: in tunnel mode it pays for what it opens here.
	r := policy.Pod{Namespace: "y", Name: "r", IP: netip.MustParseAddr("10.244.1.7"), Node: "n2"}
	in := policy.Input{Node: "n1", Pods: []policy.Pod{a, r}, Policies: []*networkingv1.NetworkPolicy{np}}
	srv := &server{cfg: Config{Node: "n1"}}
	pl := &policyLoop{overBudget: func() (datapath.PodsOverBudget, error) {
		return datapath.PodsOverBudget{PolicyCT: map[netip.Addr]int{a.IP: 40000, netip.MustParseAddr("10.244.0.99"): 33000, r.IP: 34000},
			PolicyCTMax: 32768, NAT: map[netip.Addr]int{a.IP: 9000}, NATMax: 8192}, nil
	}}
	pl.view.Store(&policyView{input: in, state: policy.Compute(in, policy.NewIdentities()), tracer: policy.NewTracer(in)})
	srv.views.add(pl)
	want := "held 40000 tracked connections, over policy-ct-pod-max 32768: its new connections to or from this node's isolated pods are dropped (DROP_POLICY_CT_BUDGET)"
	rec := httptest.NewRecorder()
	srv.handlePolicy(rec, httptest.NewRequest(http.MethodGet, "/v1/policy", nil))
	var st api.PolicyStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Endpoints) != 1 ||
		len(st.Endpoints[0].Problems) != 1 || !strings.Contains(st.Endpoints[0].Problems[0], want) {
		t.Errorf("/v1/policy = %+v %v, want x/a's problem %q", st, err, want)
	}
	if len(st.Problems) != 2 || !strings.HasPrefix(st.Problems[0], "address 10.244.0.99 (no pod has it): held 33000") ||
		!strings.HasPrefix(st.Problems[1], "pod y/r (10.244.1.7) of node n2: held 34000") {
		t.Errorf("/v1/policy problems = %q, want the two senders that are no pods of this node, y/r by name", st.Problems)
	}
	var s api.Status
	pl.fillStatus(&s)
	if s.Policy == nil || len(s.Policy.Warnings) != 3 || !strings.HasPrefix(s.Policy.Warnings[0], "pod x/a: "+want) ||
		!strings.HasPrefix(s.Policy.Warnings[1], "address 10.244.0.99 (no pod has it): held 33000") ||
		!strings.HasPrefix(s.Policy.Warnings[2], "pod y/r (10.244.1.7) of node n2: held 34000") {
		t.Errorf("status policy = %+v, want the three pods' warnings, x/a and y/r by name", s.Policy)
	}
	pl.overBudget = func() (datapath.PodsOverBudget, error) {
		return datapath.PodsOverBudget{}, errors.New("list pods: boom")
	}
	s = api.Status{}
	if pl.fillStatus(&s); s.Policy == nil || len(s.Policy.Warnings) != 1 || s.Policy.Warnings[0] != "connection budget: list pods: boom" {
		t.Errorf("status policy with a failed read = %+v", s.Policy)
	}
}

// Status warns of live connections pushed out of the connection table while the
// GC's samples show some in the last minute, and of a count it could not read.
func TestPolicyEvictionWarning(t *testing.T) {
	in := policy.Input{Node: "n1"}
	var samples evictionSamples
	inUse, readErr := uint64(40), error(nil) // the datapath's count since the table was made
	pl := &policyLoop{evicted: func() (uint64, error) { return samples.since(time.Now(), inUse), readErr }}
	pl.view.Store(&policyView{input: in, state: policy.Compute(in, policy.NewIdentities()), tracer: policy.NewTracer(in)})
	warnings := func() []string {
		var s api.Status
		if pl.fillStatus(&s); s.Policy == nil {
			t.Fatal("no policy summary")
		}
		return s.Policy.Warnings
	}
	samples.add(time.Now(), inUse) // the GC round's sample: nothing since
	if w := warnings(); len(w) != 0 {
		t.Errorf("no evictions since the last sample: warnings %q", w)
	}
	inUse += 7
	if w := warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "myelin_policy_ct pushed out 7 connections in use in the last minute") ||
		!strings.Contains(w[0], "raise policy-ct-max") {
		t.Errorf("7 evictions since the last sample: warnings %q, want one naming 7 and the remedy", w)
	}
	readErr = errors.New("read myelin_policy_ct_stats: boom")
	if w := warnings(); len(w) != 1 || w[0] != "connection table: read myelin_policy_ct_stats: boom" {
		t.Errorf("a failed read: warnings %q", w)
	}
}
