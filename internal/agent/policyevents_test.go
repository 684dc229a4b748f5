package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/kube/kubefake"
	"github.com/myelin-net/myelin/internal/policy"
)

// eventRecorder is a kube.Client that only records the Events created. With
// release set, each CreateEvent first waits for it to be closed (or for its
// context to end); with fail set, it records the Event and fails.
type eventRecorder struct {
	kube.Client
	events  chan *corev1.Event
	release chan struct{}
	fail    error
}

func newEventRecorder() *eventRecorder {
	return &eventRecorder{events: make(chan *corev1.Event, 1000)}
}

func (r *eventRecorder) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	if r.release != nil {
		select {
		case <-r.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.events <- ev
	return r.fail
}

// receive returns the next n Events created, failing t if they don't come (a
// guard against a hang, not a measure).
func (r *eventRecorder) receive(t *testing.T, n int) []*corev1.Event {
	t.Helper()
	var out []*corev1.Event
	guard := time.After(time.Minute)
	for len(out) < n {
		select {
		case ev := <-r.events:
			out = append(out, ev)
		case <-guard:
			t.Fatalf("%d Events created, want %d", len(out), n)
		}
	}
	return out
}

func testPolicy(name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// testPolicyEvents is policyEvents over cs without a rate limit and with a
// queue of size queue; its sender is not running.
func testPolicyEvents(cs kube.Client, queue int) *policyEvents {
	e := newPolicyEvents(cs, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.queue = make(chan *corev1.Event, queue)
	e.limit = rate.NewLimiter(rate.Inf, 1)
	clock := time.Date(2026, 12, 7, 15, 1, 0, 0, time.UTC)
	e.now = func() time.Time { return clock }
	return e
}

// problemPolicies are n policies, each with one problem.
func problemPolicies(n int) ([]*networkingv1.NetworkPolicy, policy.State) {
	var nps []*networkingv1.NetworkPolicy
	var st policy.State
	for i := range n {
		np := testPolicy(fmt.Sprintf("p%d", i))
		nps = append(nps, np)
		st.Problems = append(st.Problems, policy.Problem{Policy: "ns/" + np.Name, Message: "ipBlock fd00::/64: IPv6 is not enforced"})
	}
	return nps, st
}

// A policy's problem is reported once; what policyEvents keeps is only the
// policies with problems now, so one created and deleted under ever new names
// leaves nothing behind, and one whose problem goes and comes back is reported
// again.
func TestPolicyEventsForgetGonePolicies(t *testing.T) {
	e := testPolicyEvents(nil, 200) // what is queued is what run would post
	for i := range 100 {
		np := testPolicy(fmt.Sprintf("p%d", i))
		st := policy.State{Problems: []policy.Problem{{Policy: "ns/" + np.Name, Message: "ipBlock fd00::/64: IPv6 is not enforced"}}}
		e.report([]*networkingv1.NetworkPolicy{np}, st)
		e.report([]*networkingv1.NetworkPolicy{np}, st) // unchanged: no second Event
		e.report(nil, policy.State{})                   // deleted
	}
	if len(e.queue) != 100 || len(e.reported) != 0 {
		t.Fatalf("%d events, %d policies remembered; want 100 and 0", len(e.queue), len(e.reported))
	}
	np := testPolicy("back")
	bad := policy.State{Problems: []policy.Problem{{Policy: "ns/back", Message: "m"}}}
	for _, st := range []policy.State{bad, {}, bad} {
		e.report([]*networkingv1.NetworkPolicy{np}, st)
	}
	if len(e.queue) != 102 {
		t.Errorf("a problem that came back: %d events in all, want 102", len(e.queue))
	}
}

// The policy loop does not wait for the apiserver: with CreateEvent stuck,
// report of 300 broken policies returns having queued one round's worth; once
// CreateEvent answers, the queued Events are posted, and later rounds post the
// rest, each policy's once. The sender stops with its context.
func TestPolicyEventsDoNotBlockTheLoop(t *testing.T) {
	rec := newEventRecorder()
	rec.release = make(chan struct{})
	e := testPolicyEvents(rec, policyEventQueue)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { e.run(ctx); close(stopped) }()
	const n = 300
	nps, st := problemPolicies(n)

	done := make(chan struct{})
	go func() { e.report(nps, st); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute): // a guard against a hang, not a measure
		t.Fatal("report waits for CreateEvent")
	}
	if len(e.reported) != e.perRound {
		t.Fatalf("%d Events queued in one round, want %d", len(e.reported), e.perRound)
	}

	close(rec.release)
	posted := map[string]int{}
	for _, ev := range rec.receive(t, e.perRound) {
		posted[ev.InvolvedObject.Name]++
	}
	for rounds := 0; len(e.reported) < n; rounds++ {
		if rounds > n {
			t.Fatalf("%d of %d policies reported after %d rounds", len(e.reported), n, rounds)
		}
		before := len(e.reported)
		e.report(nps, st)
		for _, ev := range rec.receive(t, len(e.reported)-before) {
			posted[ev.InvolvedObject.Name]++
		}
	}
	e.report(nps, st) // all reported: nothing more
	if len(posted) != n || len(e.queue) != 0 {
		t.Errorf("%d policies posted, %d Events queued after all were reported; want %d and 0", len(posted), len(e.queue), n)
	}
	for name, c := range posted {
		if c != 1 {
			t.Errorf("policy %s: %d Events, want 1", name, c)
		}
	}
	if c := e.counts(); c.Posted != n || c.Refused+c.Failed != 0 || c.Waiting != 0 {
		t.Errorf("metrics after all were posted: %+v, want %d posted, none refused, failed or waiting", *c, n)
	}
	cancel()
	<-stopped
}

// A full queue neither blocks report nor loses what did not fit: those
// policies are not marked reported, and a later round queues them.
func TestPolicyEventsFullQueueWaits(t *testing.T) {
	e := testPolicyEvents(nil, 4) // no sender: the queue stays full
	nps, st := problemPolicies(50)
	e.report(nps, st)
	if len(e.queue) != 4 || len(e.reported) != 4 {
		t.Fatalf("%d queued, %d reported; want 4 and 4", len(e.queue), len(e.reported))
	}
	if w := e.counts().Waiting; w != 46 {
		t.Errorf("myelin_policy_events_waiting %d, want 46", w)
	}
	first := map[string]bool{}
	for range 4 {
		first[(<-e.queue).InvolvedObject.Name] = true
	}
	e.report(nps, st)
	if len(e.queue) != 4 || len(e.reported) != 8 {
		t.Fatalf("second round: %d queued, %d reported; want 4 and 8", len(e.queue), len(e.reported))
	}
	for range 4 {
		if name := (<-e.queue).InvolvedObject.Name; first[name] {
			t.Errorf("policy %s queued twice", name)
		}
	}
}

// failedPost is policyEvents whose one problem policy's Event was queued and
// failed to post with fail, and that policy and its state.
func failedPost(t *testing.T, fail error) (*policyEvents, []*networkingv1.NetworkPolicy, policy.State) {
	t.Helper()
	rec := newEventRecorder()
	rec.fail = fail
	e := testPolicyEvents(rec, policyEventQueue)
	nps, st := problemPolicies(1)
	e.report(nps, st)
	e.post(context.Background(), <-e.queue)
	rec.receive(t, 1)
	return e, nps, st
}

// An Event the apiserver refuses is not retried while the policy's message
// stays the same (no hammering); a new message is reported.
func TestPolicyEventsFailureNotRetried(t *testing.T) {
	e, nps, st := failedPost(t, apierrors.NewTooManyRequests("slow down", 1))
	e.report(nps, st)
	if len(e.queue) != 0 {
		t.Errorf("an Event the apiserver refused (429) was queued again with an unchanged message")
	}
	if c := e.counts(); c.Refused != 1 || c.Failed+c.Posted != 0 {
		t.Errorf("metrics after a refusal: %+v, want 1 refused", *c)
	}
	st.Problems[0].Message = "another problem"
	e.report(nps, st)
	if len(e.queue) != 1 {
		t.Errorf("%d Events queued for a changed message, want 1", len(e.queue))
	}
}

// An Event whose post failed without a refusal (the apiserver unavailable, a
// timeout) is queued again by the next computation.
func TestPolicyEventsTransientFailureRetried(t *testing.T) {
	for _, fail := range []error{apierrors.NewServiceUnavailable("restarting"), context.DeadlineExceeded} {
		e, nps, st := failedPost(t, fail)
		e.report(nps, st)
		if len(e.queue) != 1 {
			t.Errorf("after %v: %d Events queued again, want 1", fail, len(e.queue))
		}
		if c := e.counts(); c.Failed != 1 || c.Refused+c.Posted != 0 {
			t.Errorf("metrics after %v: %+v, want 1 failed", fail, *c)
		}
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

// A queued Event whose policy is fixed (or whose problem changes) before its turn is
// not posted: the next report supersedes it, and the metric counts it.
func TestPolicyEventsSupersededNotPosted(t *testing.T) {
	rec := newEventRecorder()
	e := testPolicyEvents(rec, 8)
	nps, bad := problemPolicies(2)
	e.report(nps, bad)
	changed := policy.State{Problems: []policy.Problem{{Policy: "ns/p1", Message: "another problem"}}}
	e.report(nps, changed) // p0 fixed, p1's problem changed: its new Event is queued too
	for len(e.queue) > 0 {
		if !e.post(context.Background(), <-e.queue) {
			t.Fatal("post stopped")
		}
	}
	got := rec.receive(t, 1)
	if len(rec.events) != 0 || !strings.HasSuffix(got[0].Message, "another problem") {
		t.Errorf("posted %q and %d more, want only p1's current problem", got[0].Message, len(rec.events))
	}
	if c := e.counts(); c.Superseded != 2 || c.Posted != 1 {
		t.Errorf("metrics %+v, want 2 superseded and 1 posted", *c)
	}
}

func TestPolicyEventsRepeatedProblemPostedOnce(t *testing.T) {
	rec := newEventRecorder()
	e := testPolicyEvents(rec, 8)
	nps, bad := problemPolicies(1)
	e.report(nps, bad)
	e.report(nps, policy.State{}) // fixed, then broken again the same way before run's turn
	e.report(nps, bad)
	for len(e.queue) > 0 {
		if !e.post(context.Background(), <-e.queue) {
			t.Fatal("post stopped")
		}
	}
	rec.receive(t, 1)
	if len(rec.events) != 0 {
		t.Errorf("posted %d more Events saying the same, want one", len(rec.events))
	}
	if c := e.counts(); c.Superseded != 1 || c.Posted != 1 {
		t.Errorf("metrics %+v, want 1 superseded and 1 posted", *c)
	}
	e.report(nps, policy.State{}) // fixed after its Event was posted, then broken again: reported afresh
	e.report(nps, bad)
	if !e.post(context.Background(), <-e.queue) {
		t.Fatal("post stopped")
	}
	rec.receive(t, 1)
}

// A policy flipping between broken and fixed finds its Event already there when
// it breaks the same way again: one Event per policy, node and message, not one a
// flip; another message or another node has its own.
func TestPolicyEventsFlipReusesEvent(t *testing.T) {
	cs := fake.NewSimpleClientset()
	e := testPolicyEvents(kubefake.Wrap(cs), 8)
	nps, bad := problemPolicies(1)
	nps[0].UID = "uid-p0"
	other := policy.State{Problems: []policy.Problem{{Policy: "ns/p0", Message: "another problem"}}}
	for _, st := range []policy.State{bad, {}, bad, {}, bad, other} {
		e.report(nps, st)
		for len(e.queue) > 0 {
			if !e.post(context.Background(), <-e.queue) {
				t.Fatal("post stopped")
			}
		}
	}
	e2 := testPolicyEvents(kubefake.Wrap(cs), 8)
	e2.node = "n2"
	e2.report(nps, bad)
	if !e2.post(context.Background(), <-e2.queue) {
		t.Fatal("post stopped")
	}
	// Broken again the same way a period later: a new Event, which the apiserver
	// keeps its whole TTL from now.
	e.now = func() time.Time { return time.Date(2026, 12, 7, 15, 11, 0, 0, time.UTC) }
	e.report(nps, policy.State{})
	e.report(nps, bad)
	if !e.post(context.Background(), <-e.queue) {
		t.Fatal("post stopped")
	}
	evs, err := cs.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 4 {
		t.Errorf("%d Events, want 4 (n1's two messages and the first again a period later, n2's one)", len(evs.Items))
	}
	if c := e.counts(); c.Posted != 5 || c.Refused != 0 {
		t.Errorf("metrics %+v: want the Events already there counted as posted", *c)
	}
}

// Event names stay valid for the longest policy names, whatever their cut ends with.
func TestPolicyEventNameValid(t *testing.T) {
	for _, name := range []string{"p", strings.Repeat("a", 253), strings.Repeat("a", 235) + "-b" + strings.Repeat("c", 16),
		strings.Repeat("a", 234) + ".-" + strings.Repeat("c", 17)} {
		np := testPolicy(name)
		at := time.Date(2026, 12, 7, 15, 1, 0, 0, time.UTC)
		got := policyEventName(np, "n1", "m", at)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("policy %q: Event name %q: %v", name, got, errs)
		}
		if got == policyEventName(np, "n2", "m", at) || got == policyEventName(np, "n1", "m2", at) ||
			got == policyEventName(np, "n1", "m", at.Add(policyEventReuse)) {
			t.Errorf("policy %q: Event names of another node, message or period are the same", name)
		}
		if got != policyEventName(np, "n1", "m", at.Add(time.Minute)) {
			t.Errorf("policy %q: Event names within one period differ", name)
		}
	}
}
