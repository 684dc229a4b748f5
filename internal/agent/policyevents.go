package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/metrics"
	"github.com/myelin-net/myelin/internal/policy"
)

// policyEvents reports each policy problem once as a Warning Event on the
// policy (and again when its message changes, or when it comes back after it
// was gone). What it keeps is bounded by the policies that have problems now:
// a policy that is gone or fixed is forgotten, so churning policy names can't
// grow it.
//
// report runs on the policy loop, which CNI ADD waits for (policyadmit.go), so
// it never calls the apiserver: it hands the Events to run through a bounded
// queue, and run posts them at policyEventRate. A tenant with hundreds of
// broken policies, or flipping policies between valid and invalid, once held
// every node's loop for a CreateEvent each, behind client-go's rate limit.
type policyEvents struct {
	cs   kube.Client
	node string
	log  *slog.Logger
	// reported (report's alone) holds each policy's message and Event once the
	// Event is queued: a queued Event the apiserver then refuses (4xx) is not retried
	// until the message changes, the policy is fixed or gone, or the agent
	// restarts. Retrying refusals would have every node repeat the same Events
	// to an apiserver that refuses them (429, 403); `myelin endpoints` lists
	// every problem meanwhile. One that failed otherwise (a timeout, a 5xx) comes
	// back through retry and is queued again by the next computation. An Event
	// that could not be queued (perRound reached, a full queue) is not reported:
	// the next computation queues it.
	reported map[string]queuedEvent
	queue    chan *corev1.Event
	retry    chan string   // policies whose Event post failed without a refusal
	failures int           // post's, since its last log line
	perRound int           // new Events one report queues at most
	limit    *rate.Limiter // run's posts
	waitLog  rate.Sometimes
	failLog  rate.Sometimes
	now      func() time.Time // time.Now but in tests

	// current is, after the last report, the Event queued for each policy's present
	// problems: post drops a queued Event that is not its policy's current one: the
	// policy was fixed or its message changed meanwhile, or it was fixed and broke
	// again the same way, which queued a second Event saying the same (a
	// flip-flopping policy would otherwise have its stale or repeated Events posted,
	// the queue at 1/s behind it).
	current atomic.Pointer[map[string]*corev1.Event]

	// What the metrics read (counts): Events posted, refused, failed otherwise,
	// superseded before their turn, and those the last report could not queue.
	posted, refused, failed, superseded atomic.Uint64
	waiting                             atomic.Int64
}

// queuedEvent is the Event queued for a policy's problems, and their message.
type queuedEvent struct {
	msg string
	ev  *corev1.Event
}

// The Events' pace. One node posts at most policyEventRate a second after a
// burst of policyEventBurst: a handful of broken policies are reported at once,
// hundreds over minutes; a flood beyond the queue waits, and is logged once a
// policyEventLogEvery. policyEventsPerRound, below the queue's size, leaves
// room for the next computation's Events while run works through a burst.
const (
	policyEventQueue     = 64
	policyEventsPerRound = 32
	policyEventRate      = 1
	policyEventBurst     = 10
	policyEventTimeout   = 10 * time.Second // one CreateEvent
	policyEventLogEvery  = time.Minute
)

// Bounds of one Event's message: the first policyEventProblems problems of a
// policy, each cut at policyEventProblemLen bytes, and how many more there are.
// A policy may carry thousands of unrepresentable rules (e.g. IPv6 ipBlocks);
// an Event naming them all would be megabytes the apiserver may refuse, retried
// on every computation by every node.
const (
	policyEventProblems   = 5
	policyEventProblemLen = 256
)

func newPolicyEvents(cs kube.Client, node string, log *slog.Logger) *policyEvents {
	return &policyEvents{cs: cs, node: node, log: log, reported: map[string]queuedEvent{},
		queue: make(chan *corev1.Event, policyEventQueue), retry: make(chan string, policyEventQueue), perRound: policyEventsPerRound,
		limit:   rate.NewLimiter(policyEventRate, policyEventBurst),
		waitLog: rate.Sometimes{Interval: policyEventLogEvery}, failLog: rate.Sometimes{Interval: policyEventLogEvery}, now: time.Now}
}

// policyEventMessages joins each policy's problems into its Event message, within the
// bounds above; the rest are named by node's GET /v1/policy (myelin endpoints).
func policyEventMessages(problems []policy.Problem, node string) map[string]string {
	var order []string
	byPolicy := map[string][]string{}
	for _, pr := range problems {
		if _, ok := byPolicy[pr.Policy]; !ok {
			order = append(order, pr.Policy)
		}
		byPolicy[pr.Policy] = append(byPolicy[pr.Policy], pr.Message)
	}
	msgs := make(map[string]string, len(order))
	for _, name := range order {
		all := byPolicy[name]
		var b strings.Builder
		for i, m := range all[:min(len(all), policyEventProblems)] {
			if i > 0 {
				b.WriteString("; ")
			}
			if len(m) > policyEventProblemLen {
				m = strings.ToValidUTF8(m[:policyEventProblemLen], "") + "…"
			}
			b.WriteString(m)
		}
		if more := len(all) - policyEventProblems; more > 0 {
			fmt.Fprintf(&b, "; and %d more (`myelin endpoints --node %s` lists them all)", more, node)
		}
		msgs[name] = b.String()
	}
	return msgs
}

// report queues an Event for each policy of nps whose problems in st are new
// (perRound at most), without waiting: what does not fit waits for the next call.
func (e *policyEvents) report(nps []*networkingv1.NetworkPolicy, st policy.State) {
	msgs := policyEventMessages(st.Problems, e.node)
	for retried := true; retried; {
		select {
		case name := <-e.retry:
			delete(e.reported, name) // its post failed: queue it again
		default:
			retried = false
		}
	}
	for name := range e.reported {
		if _, ok := msgs[name]; !ok {
			delete(e.reported, name) // gone or fixed: report it afresh if it comes back
		}
	}
	next, waiting := e.newEvents(nps, msgs)
	e.publish(msgs, next)
	queued := 0
	for _, p := range next {
		select {
		case e.queue <- p.ev:
			e.reported[p.name] = p.queuedEvent
			queued++
			continue
		default: // full: this and the rest wait for the next computation
		}
		waiting += len(next) - queued
		break
	}
	e.waiting.Store(int64(waiting))
	if waiting > 0 {
		e.waitLog.Do(func() {
			e.log.Warn("policy: Events wait for later computations", "waiting", waiting, "queued now", queued,
				"rate per second", policyEventRate)
		})
	}
}

// pendingEvent is an Event report is about to queue for the policy name.
type pendingEvent struct {
	name string
	queuedEvent
}

// newEvents makes the Events of the policies whose problems msgs has not reported yet,
// perRound at most, and counts those beyond it.
func (e *policyEvents) newEvents(nps []*networkingv1.NetworkPolicy, msgs map[string]string) (next []pendingEvent, waiting int) {
	for _, np := range nps {
		name := np.Namespace + "/" + np.Name
		msg, ok := msgs[name]
		if !ok || e.reported[name].msg == msg {
			continue
		}
		if len(next) == e.perRound {
			waiting++
			continue
		}
		next = append(next, pendingEvent{name, queuedEvent{msg: msg, ev: e.event(np, msg)}})
	}
	return next, waiting
}

// publish stores in current the Event of each policy's present problems: the one
// queued before, or the one about to be. It runs before report queues any: run may
// post one the moment it is queued, and must find it current.
func (e *policyEvents) publish(msgs map[string]string, next []pendingEvent) {
	current := make(map[string]*corev1.Event, len(msgs))
	for name, msg := range msgs {
		if r, ok := e.reported[name]; ok && r.msg == msg {
			current[name] = r.ev
		}
	}
	for _, p := range next {
		current[p.name] = p.ev
	}
	e.current.Store(&current)
}

// event is the Warning Event saying node cannot enforce np as written. Its name
// is policyEventName's: the same problems reported again within
// policyEventReuse (a policy flipping between broken and fixed, an agent
// restart) find their Event already there instead of adding one a flip on every
// node.
func (e *policyEvents) event(np *networkingv1.NetworkPolicy, msg string) *corev1.Event {
	now := metav1.NewTime(e.now())
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: policyEventName(np, e.node, msg, now.Time), Namespace: np.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "NetworkPolicy", APIVersion: "networking.k8s.io/v1", Namespace: np.Namespace, Name: np.Name, UID: np.UID},
		Reason:         "PolicyNotEnforced", Message: fmt.Sprintf("node %s: %s", e.node, msg), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "myelin-agent", Host: e.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

// policyEventName names the Event of np's problems msg on node at now: the
// policy's name (cut to leave room), a dot, and 16 hex digits of a hash of the
// policy's UID, the node, msg and now's policyEventReuse period. A valid Event
// name: a policy name is a DNS subdomain, and the cut drops what would end a
// label badly.
func policyEventName(np *networkingv1.NetworkPolicy, node, msg string, now time.Time) string {
	period := now.Unix() / int64(policyEventReuse/time.Second)
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", np.UID, node, msg, period))
	base := np.Name
	if len(base) > policyEventNameBase {
		base = strings.TrimRight(base[:policyEventNameBase], ".-")
	}
	return base + "." + hex.EncodeToString(h[:8])
}

// policyEventReuse is how long problems reported again reuse their Event: an
// Event reused is at most this old, so the apiserver keeps it (its event TTL,
// 1 h by default) well after the report; a flipping policy adds at most one Event
// a period per node and message.
const policyEventReuse = 10 * time.Minute

// policyEventNameBase is how much of a policy's name its Events' names keep: 253
// (a DNS subdomain) less the dot and the hash.
const policyEventNameBase = 253 - 1 - 16

// run posts the queued Events until ctx ends (post).
func (e *policyEvents) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			if !e.post(ctx, ev) {
				return
			}
		}
	}
}

// post posts one Event within limit and policyEventTimeout; false when ctx ended. A
// failure is logged (once a policyEventLogEvery, with the count); one the apiserver
// did not refuse (a timeout, a 5xx, no connection) hands the policy back to report
// through retry, so the next computation queues it again; a refusal (4xx: 429, 403,
// a namespace gone) is not retried (see reported). An Event already there (its
// name says the same problems on this node) counts as posted.
func (e *policyEvents) post(ctx context.Context, ev *corev1.Event) bool {
	if cur := e.current.Load(); cur != nil && (*cur)[ev.Namespace+"/"+ev.InvolvedObject.Name] != ev {
		e.superseded.Add(1) // fixed, gone, changed or queued again since
		return true
	}
	if e.limit.Wait(ctx) != nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, policyEventTimeout)
	err := e.cs.CreateEvent(cctx, ev)
	cancel()
	if err == nil || apierrors.IsAlreadyExists(err) {
		e.posted.Add(1)
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	e.failures++
	e.failLog.Do(func() {
		e.log.Warn("policy: create event", "policy", ev.Namespace+"/"+ev.InvolvedObject.Name, "err", err,
			"failures", e.failures)
		e.failures = 0
	})
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code < 500 {
		e.refused.Add(1)
	} else {
		e.failed.Add(1)
		select {
		case e.retry <- ev.Namespace + "/" + ev.InvolvedObject.Name:
		default: // report has not caught up: the policy keeps its reported message
		}
	}
	return true
}

// counts are the Events' metrics (myelin_policy_events_*), safe from any goroutine.
func (e *policyEvents) counts() *metrics.PolicyEventCounts {
	return &metrics.PolicyEventCounts{Posted: e.posted.Load(), Refused: e.refused.Load(), Failed: e.failed.Load(),
		Superseded: e.superseded.Load(), Waiting: int(e.waiting.Load())}
}
