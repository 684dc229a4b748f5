package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/policy"
)

// policyEvents reports each policy problem once as a Warning Event on the
// policy (and again when its message changes, or when it comes back after it
// was gone). What it keeps is bounded by the policies that have problems now:
// a policy that is gone or fixed is forgotten, so churning policy names can't
// grow it.
type policyEvents struct {
	cs       kube.Client
	node     string
	log      *slog.Logger
	reported map[string]string // policy -> message reported
}

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
	return &policyEvents{cs: cs, node: node, log: log, reported: map[string]string{}}
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

func (e *policyEvents) report(ctx context.Context, nps []*networkingv1.NetworkPolicy, st policy.State) {
	msgs := policyEventMessages(st.Problems, e.node)
	for name := range e.reported {
		if _, ok := msgs[name]; !ok {
			delete(e.reported, name) // gone or fixed: report it afresh if it comes back
		}
	}
	for _, np := range nps {
		name := np.Namespace + "/" + np.Name
		msg, ok := msgs[name]
		if !ok || e.reported[name] == msg {
			continue
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: np.Name + ".", Namespace: np.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "NetworkPolicy", APIVersion: "networking.k8s.io/v1", Namespace: np.Namespace, Name: np.Name, UID: np.UID},
			Reason:         "PolicyNotEnforced", Message: fmt.Sprintf("node %s: %s", e.node, msg), Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "myelin-agent", Host: e.node},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}
		if err := e.cs.CreateEvent(ctx, ev); err != nil {
			e.log.Warn("policy: create event", "policy", name, "err", err)
			continue
		}
		e.reported[name] = msg
	}
}
