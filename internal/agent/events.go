package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/kube"
)

// Events: what an operator of a DaemonSet looks at first (kubectl describe node,
// kubectl get events) must say when a node does not run as configured. The agent
// records a Warning Event on its Node, and on every NodeConfig that configured it,
// when host-routing auto falls back to legacy and when the datapath cannot be loaded
// or attached; the same reason is in its log. Events are best effort: a failure to
// record one is logged and changes nothing else.

// Event reasons the agent records.
const (
	reasonHostRoutingFallback  = "HostRoutingFallback"
	reasonDatapathAttachFailed = "DatapathAttachFailed"
)

// eventTargets are the objects an Event about this node goes on: the Node and the
// NodeConfigs among the configuration's sources ("NodeConfig <ns>/<name>"). Each
// carries its object's UID: kubectl describe lists only the Events whose
// involvedObject.uid is the object's.
func eventTargets(node string, nodeUID types.UID, conf config.Config) []corev1.ObjectReference {
	refs := []corev1.ObjectReference{{Kind: "Node", APIVersion: "v1", Name: node, UID: nodeUID}}
	for _, s := range conf.Sources {
		nsName, ok := strings.CutPrefix(s, "NodeConfig ")
		if !ok {
			continue
		}
		ns, name, ok := strings.Cut(nsName, "/")
		if !ok {
			continue
		}
		refs = append(refs, corev1.ObjectReference{Kind: "NodeConfig", APIVersion: "myelin.io/v1alpha1", Namespace: ns, Name: name,
			UID: conf.SourceUIDs[s]})
	}
	return refs
}

// recordWarning records a Warning Event with reason and msg on every target.
func recordWarning(ctx context.Context, cs kube.Client, node string, targets []corev1.ObjectReference, reason, msg string, log *slog.Logger) {
	now := metav1.Now()
	for _, ref := range targets {
		ns := ref.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault // Events about cluster-scoped objects
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: ns},
			InvolvedObject: ref,
			Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "myelin-agent", Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		if err := cs.CreateEvent(ctx, ev); err != nil {
			log.Error("record event", "reason", reason, "on", ref.Kind+" "+ref.Name, "err", err)
		}
	}
}

// fallbackWarning says why the node runs in a mode other than the one configured:
// "" when it runs as configured. Only host-routing auto falls back; host-routing bpf
// refuses to start instead (decideHostRouting).
func fallbackWarning(conf config.Config, plan nodePlan) string {
	if conf.HostRouting != config.HostRoutingAuto || plan.HostRouting.BPF {
		return ""
	}
	return fmt.Sprintf("host-routing auto on node %s: %s", plan.Node, plan.HostRouting.Reason)
}

// reportFallbacks logs and records the node's mode fallbacks, once at start.
func (s *startup) reportFallbacks(ctx context.Context) {
	msg := fallbackWarning(s.conf, s.plan)
	if msg == "" {
		return
	}
	s.log.Warn("mode fallback", "reason", reasonHostRoutingFallback, "detail", msg)
	recordWarning(ctx, s.cs, s.cfg.Node, eventTargets(s.cfg.Node, s.nodeUID, s.conf), reasonHostRoutingFallback, msg, s.log)
}

// reportDatapathFailure logs and records that the datapath could not be loaded or
// attached, and withdraws the conflist an earlier agent left: the agent then stops,
// its pod never turns ready, and the runtime reports the network not ready, so no pod
// is scheduled onto a datapath that drops its traffic.
func (s *startup) reportDatapathFailure(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping (SIGTERM), not failing: the conflist stays for the next agent
	}
	msg := fmt.Sprintf("myelin could not load or attach its datapath on node %s: %v", s.cfg.Node, err)
	s.log.Error("datapath failed", "reason", reasonDatapathAttachFailed, "err", err)
	if werr := withdrawConflist(s.cfg); werr != nil {
		s.log.Error("withdraw the conflist after the datapath failed", "err", werr)
	}
	recordWarning(ctx, s.cs, s.cfg.Node, eventTargets(s.cfg.Node, s.nodeUID, s.conf), reasonDatapathAttachFailed, msg, s.log)
}
