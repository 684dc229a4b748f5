package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/policy"
)

// eventRecorder is a kube.Client that only records the Events created.
type eventRecorder struct {
	kube.Client
	events []*corev1.Event
}

func (r *eventRecorder) CreateEvent(_ context.Context, ev *corev1.Event) error {
	r.events = append(r.events, ev)
	return nil
}

func testPolicy(name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// A policy's problem is reported once; what policyEvents keeps is only the
// policies with problems now, so one created and deleted under ever new names
// leaves nothing behind, and one whose problem goes and comes back is reported
// again.
func TestPolicyEventsForgetGonePolicies(t *testing.T) {
	rec := &eventRecorder{}
	e := newPolicyEvents(rec, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	for i := range 100 {
		np := testPolicy(fmt.Sprintf("p%d", i))
		st := policy.State{Problems: []policy.Problem{{Policy: "ns/" + np.Name, Message: "ipBlock fd00::/64: IPv6 is not enforced"}}}
		e.report(ctx, []*networkingv1.NetworkPolicy{np}, st)
		e.report(ctx, []*networkingv1.NetworkPolicy{np}, st) // unchanged: no second Event
		e.report(ctx, nil, policy.State{})                   // deleted
	}
	if len(rec.events) != 100 || len(e.reported) != 0 {
		t.Fatalf("%d events, %d policies remembered; want 100 and 0", len(rec.events), len(e.reported))
	}
	np := testPolicy("back")
	bad := policy.State{Problems: []policy.Problem{{Policy: "ns/back", Message: "m"}}}
	for _, st := range []policy.State{bad, {}, bad} {
		e.report(ctx, []*networkingv1.NetworkPolicy{np}, st)
	}
	if len(rec.events) != 102 {
		t.Errorf("a problem that came back: %d events in all, want 102", len(rec.events))
	}
}

// An Event names a bounded number of problems, each cut, and how many more
// there are.
func TestPolicyEventMessageBounded(t *testing.T) {
	var problems []policy.Problem
	for i := range 2000 {
		problems = append(problems, policy.Problem{Policy: "ns/big", Message: fmt.Sprintf("rule %d: %s", i, strings.Repeat("x", 1000))})
	}
	msg := policyEventMessages(problems, "n1")["ns/big"]
	if limit := policyEventProblems*(policyEventProblemLen+8) + 200; len(msg) > limit {
		t.Errorf("message of %d bytes, want at most %d", len(msg), limit)
	}
	for _, want := range []string{"rule 0: ", "rule 4: ", "and 1995 more", "myelin endpoints --node n1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %.300q… lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "rule 5: ") {
		t.Errorf("message names more than %d problems", policyEventProblems)
	}
}
