package relay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
)

// labelled is flow at(node, sec) with n labels of size bytes each at its source.
func labelled(node string, sec, n, size int) *flow.Flow {
	f := at(node, sec)
	f.Source.Labels = map[string]string{}
	for i := range n {
		f.Source.Labels[fmt.Sprintf("k%06d", i)] = strings.Repeat("v", size)
	}
	return f
}

// allowedBy is flow at(node, sec), a POLICY_VERDICT naming n allowing policies.
func allowedBy(node string, sec, n int) *flow.Flow {
	f := at(node, sec)
	f.Type = flow.TypePolicyVerdict
	for i := range n {
		f.Policies = append(f.Policies, fmt.Sprintf("ns/p%03d", i))
	}
	return f
}

// A hostile node (root on it serves :4244 with the agent's key) can't make the relay
// hold what no agent sends: a flow with more labels than an agent puts in one is
// dropped, and a message over hubble.ClientMaxRecv ends that node's stream (the
// relay says so), while the other nodes' flows go on.
func TestRelayDropsWhatNoAgentSends(t *testing.T) {
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{
		labelled("a", 1, hubble.FlowLabelsMax, 8),   // as much as an agent sends: passes
		labelled("a", 2, hubble.FlowLabelsMax+1, 8), // one more: dropped
		at("a", 3),
		allowedBy("a", 8, hubble.FlowPoliciesMax),   // as many policies as an agent names: passes
		allowedBy("a", 9, hubble.FlowPoliciesMax+1), // one more: dropped
	}})
	huge := labelled("b", 5, 2000, 200) // ~430 KB in one message
	b := startNode(t, "b", &nodeSource{history: []*flow.Flow{at("b", 4), huge, at("b", 6)}})
	c := startNode(t, "c", &nodeSource{history: []*flow.Flow{at("c", 7)}})
	st, err := startRelay(t, a, b, c).GetFlows(context.Background(), &observerpb.GetFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, st)
	for _, want := range []string{"a:1", "a:3", "b:4", "c:7", "a:8"} {
		if !slices.Contains(got, want) {
			t.Errorf("relay answered %v, want %s among them", got, want)
		}
	}
	for _, bad := range []string{"a:2", "b:5", "a:9"} {
		if slices.Contains(got, bad) {
			t.Errorf("relay answered %v, with %s, which no agent sends", got, bad)
		}
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "unavailable:") && strings.Contains(s, "b") }) {
		t.Errorf("relay answered %v, want node b reported unavailable after its oversized message", got)
	}
}

// A flow dated after the relay's clock is dated now: a hostile node's flows from
// the future would stay the newest of every --last answer and on the UI's screen.
func TestRelayDatesFutureFlowsNow(t *testing.T) {
	future := at("a", 2)
	future.Time = time.Now().Add(time.Hour)
	resp := &observerpb.GetFlowsResponse{Time: timestamppb.New(future.Time),
		ResponseTypes: &observerpb.GetFlowsResponse_Flow{Flow: hubble.ToProto(future)}}
	before := time.Now()
	if !fromPeer(resp, "a") {
		t.Fatal("a flow from the future was dropped, want it kept at the relay's time")
	}
	if got := resp.GetTime().AsTime(); got.Before(before) || got.After(time.Now()) || !resp.GetFlow().GetTime().AsTime().Equal(got) {
		t.Errorf("dated %v (flow %v), want the relay's time of receipt", got, resp.GetFlow().GetTime().AsTime())
	}
}

// A hostile node can't hold a request without --follow by never ending its stored
// flows: it is cut after the collect timeout and reported unavailable, and the other
// nodes' flows are answered.
func TestRelayBoundsAHostileNodesStream(t *testing.T) {
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1)}})
	b := startNode(t, "b", &nodeSource{history: []*flow.Flow{at("b", 3)}, hang: true})
	r := New(Config{Discover: Static([]Peer{a, b}), Version: "test", Window: testWindow, Timeout: testPeerTimeout,
		CollectTimeout: 500 * time.Millisecond})
	st, err := dialRelay(t, serveRelay(t, r)).GetFlows(context.Background(), &observerpb.GetFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, st)
	if !slices.Contains(got, "a:1") || !slices.Contains(got, "b:3") {
		t.Errorf("relay answered %v, want a:1 and b:3", got)
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "unavailable:") && strings.Contains(s, "b") }) {
		t.Errorf("relay answered %v, want node b reported unavailable once cut", got)
	}
}
