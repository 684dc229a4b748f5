package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// A fallback of host-routing auto is reported on the Node and on each NodeConfig
// that configured the node; a node running as configured reports nothing.
func TestFallbackEvents(t *testing.T) {
	plan := nodePlan{Node: "n1", HostRouting: hostRoutingDecision{BPF: false, Reason: "BPF host routing requires BPF masquerade"}}
	conf := config.Config{HostRouting: config.HostRoutingAuto, Sources: []string{"ConfigMap kube-system/myelin-config", "NodeConfig kube-system/legacy"},
		SourceUIDs: map[string]types.UID{"NodeConfig kube-system/legacy": "uid-nc"}}
	if msg := fallbackWarning(conf, plan); !strings.Contains(msg, "requires BPF masquerade") || !strings.Contains(msg, "n1") {
		t.Errorf("fallbackWarning = %q, want the node and the reason", msg)
	}
	for _, c := range []struct {
		hr  config.HostRouting
		bpf bool
	}{{config.HostRoutingAuto, true}, {config.HostRouting("legacy"), false}} {
		p := plan
		p.HostRouting.BPF = c.bpf
		if msg := fallbackWarning(config.Config{HostRouting: c.hr}, p); msg != "" {
			t.Errorf("host-routing %s, BPF %v: fallbackWarning = %q, want none", c.hr, c.bpf, msg)
		}
	}

	cs := fake.NewSimpleClientset()
	s := &startup{cfg: Config{Node: "n1"}, nodeUID: "uid-node", conf: conf, plan: plan, cs: kubefake.Wrap(cs), log: slog.Default()}
	s.reportFallbacks(context.Background())
	nodeEvents, _ := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	ncEvents, _ := cs.CoreV1().Events("kube-system").List(context.Background(), metav1.ListOptions{})
	if len(nodeEvents.Items) != 1 || nodeEvents.Items[0].InvolvedObject.Kind != "Node" || nodeEvents.Items[0].Reason != reasonHostRoutingFallback {
		t.Errorf("Node events = %+v, want one %s", nodeEvents.Items, reasonHostRoutingFallback)
	}
	if len(ncEvents.Items) != 1 || ncEvents.Items[0].InvolvedObject.Kind != "NodeConfig" || ncEvents.Items[0].InvolvedObject.Name != "legacy" {
		t.Errorf("NodeConfig events = %+v, want one on NodeConfig legacy", ncEvents.Items)
	}
	// kubectl describe lists an object's Events by involvedObject.uid.
	if len(nodeEvents.Items) == 1 && nodeEvents.Items[0].InvolvedObject.UID != "uid-node" {
		t.Errorf("Node event's involvedObject.uid = %q, want the Node's uid-node", nodeEvents.Items[0].InvolvedObject.UID)
	}
	if len(ncEvents.Items) == 1 && ncEvents.Items[0].InvolvedObject.UID != "uid-nc" {
		t.Errorf("NodeConfig event's involvedObject.uid = %q, want the NodeConfig's uid-nc", ncEvents.Items[0].InvolvedObject.UID)
	}
}

// A datapath that cannot be loaded or attached is an Event on the Node with the
// error; an agent stopping on SIGTERM records none.
func TestDatapathFailureEvent(t *testing.T) {
	cs := fake.NewSimpleClientset()
	s := &startup{cfg: Config{Node: "n1"}, cs: kubefake.Wrap(cs), log: slog.Default()}
	s.reportDatapathFailure(context.Background(), errors.New("attach myelin_from_netdev to eth0: operation not permitted"))
	evs, _ := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != reasonDatapathAttachFailed || !strings.Contains(evs.Items[0].Message, "operation not permitted") {
		t.Fatalf("events = %+v, want one %s with the error", evs.Items, reasonDatapathAttachFailed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.reportDatapathFailure(ctx, context.Canceled)
	if evs, _ := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{}); len(evs.Items) != 1 {
		t.Errorf("a stopping agent recorded an Event: %+v", evs.Items)
	}
}

// The firewall guard's Event on the Node carries the Node's UID too.
func TestGuardEventCarriesNodeUID(t *testing.T) {
	cs := fake.NewSimpleClientset()
	g := newGuardLoop(&guardState{}, nodePlan{Node: "n1"}, "uid-node", kubefake.Wrap(cs), newLoops(), slog.Default())
	g.nodeEvent(context.Background(), corev1.EventTypeWarning, "UserFirewallRules", "rules appeared")
	evs, _ := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].InvolvedObject.UID != "uid-node" || evs.Items[0].InvolvedObject.Name != "n1" {
		t.Errorf("guard events = %+v, want one on Node n1 with uid uid-node", evs.Items)
	}
}
