package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/guard"
	"github.com/myelin-net/myelin/internal/kube"
)

// guardInterval is how often the agent looks for firewall rules that appeared later.
const guardInterval = 30 * time.Second

// guardState is what the user-iptables guard found, for status.
type guardState struct {
	mu      sync.Mutex
	setting config.Guard
	atStart []string // table/chain places found at start
	now     []string // places found by the last scan
	warning string
}

// scanGuard runs the guard once at start; with user-iptables-guard off it finds nothing.
func scanGuard(setting config.Guard) (*guardState, error) {
	g := &guardState{setting: setting}
	if setting == config.GuardOff {
		return g, nil
	}
	findings, err := guard.Scan()
	if err != nil {
		return nil, fmt.Errorf("user-iptables-guard: %w; set user-iptables-guard to off to skip the check", err)
	}
	g.atStart = guard.Places(findings)
	g.now = g.atStart
	if setting == config.GuardWarn && len(g.atStart) > 0 {
		g.warning = "BPF host routing bypasses the user-defined firewall rules in " + strings.Join(g.atStart, ", ") +
			" (user-iptables-guard is warn)"
	}
	return g, nil
}

// guardLoop rescans the node's rules every guardInterval and raises a status warning
// and a Warning Event on the Node when rules appear that were not there at start
// (loop "user-iptables-guard"; nothing with user-iptables-guard off).
type guardLoop struct {
	state       *guardState
	hostRouting hostRoutingDecision
	node        string
	nodeUID     types.UID // the Node's, so its Events show in kubectl describe node
	cs          kube.Client
	loops       *loops
	log         *slog.Logger
}

func newGuardLoop(state *guardState, p nodePlan, nodeUID types.UID, cs kube.Client, l *loops, log *slog.Logger) *guardLoop {
	return &guardLoop{state: state, hostRouting: p.HostRouting, node: p.Node, nodeUID: nodeUID, cs: cs, loops: l, log: log}
}

func (g *guardLoop) Run(ctx context.Context) {
	if g.state.setting == config.GuardOff {
		return
	}
	reported := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(guardInterval):
		}
		findings, err := guard.Scan()
		g.loops.report("user-iptables-guard", err)
		if err != nil {
			continue
		}
		places := guard.Places(findings)
		var added []string
		for _, p := range places {
			if !slices.Contains(g.state.atStart, p) && !reported[p] {
				added = append(added, p)
				reported[p] = true
			}
		}
		g.state.mu.Lock()
		g.state.now = places
		if len(added) > 0 {
			g.state.warning = fmt.Sprintf("user-defined firewall rules appeared in %s after the agent started; with %s host routing they %s",
				strings.Join(added, ", "), g.hostRouting.Mode(), map[bool]string{true: "do not apply to pod traffic", false: "apply"}[g.hostRouting.BPF])
		}
		warning := g.state.warning
		g.state.mu.Unlock()
		if len(added) > 0 {
			g.log.Warn("user-defined firewall rules appeared", "places", added)
			g.nodeEvent(ctx, corev1.EventTypeWarning, "UserFirewallRules", warning)
		}
	}
}

func (g *guardState) status() api.GuardInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return api.GuardInfo{Setting: string(g.setting), Found: g.now, Warning: g.warning}
}

// nodeEvent records an Event on this node's Node object.
func (g *guardLoop) nodeEvent(ctx context.Context, typ, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: g.node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: g.node, UID: g.nodeUID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "myelin-agent", Host: g.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if err := g.cs.CreateEvent(ctx, ev); err != nil {
		g.log.Error("record node event", "reason", reason, "err", err)
	}
}
