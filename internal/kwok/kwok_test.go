package kwok

import (
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/k8s"
)

func TestVersionMatchesScript(t *testing.T) {
	b, err := os.ReadFile("../../scripts/build-kwok.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KWOK_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Errorf("scripts/build-kwok.sh pins %q, internal/kwok %s: keep them equal", m, Version)
	}
}

// Every simulated node gets its own /26 inside the cluster CIDR, none in the first /24
// (the real node's), and an InternalIP on segment A clear of the lab's hosts.
func TestNodeAddresses(t *testing.T) {
	cluster, seg := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("198.18.0.0/24")
	first := netip.MustParsePrefix("10.244.0.0/24")
	seen := map[netip.Prefix]bool{}
	for i := 0; i < MaxNodes; i++ {
		p := NodePodCIDR(cluster, i)
		if p.Bits() != 26 || !cluster.Contains(p.Addr()) || first.Overlaps(p) || seen[p] {
			t.Fatalf("node %d: PodCIDR %v (want a fresh /26 in %v outside %v)", i, p, cluster, first)
		}
		seen[p] = true
		ip := NodeIP(seg, i)
		if !seg.Contains(ip) || ip.As4()[3] < 100 || ip.As4()[3] > 249 {
			t.Fatalf("node %d: IP %v (want %v .100-.249)", i, ip, seg)
		}
	}
	if got := NodePodCIDR(cluster, 0); got != netip.MustParsePrefix("10.244.1.0/26") {
		t.Errorf("node 0: %v, want 10.244.1.0/26", got)
	}
}

func TestShapeValidate(t *testing.T) {
	for _, bad := range []Shape{{0, 1, 1}, {MaxNodes + 1, 1, 1}, {10, 10*MaxPodsPerNode + 1, 1}, {10, 5, 6}, {10, 0, 0}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if err := (Shape{1000, 50000, 10000}).Validate(); err != nil {
		t.Errorf("the issue's shape: %v", err)
	}
}

// Pod i is in Service i mod Services, in that Service's namespace, and on node i mod
// Nodes.
func TestPodPlacement(t *testing.T) {
	s := Shape{Nodes: 3, Pods: 10, Services: 4}
	p := s.Pod(7)
	if p.Spec.NodeName != NodeName(1) || p.Labels["svc"] != ServiceName(3) || Service(3).Spec.Selector["svc"] != ServiceName(3) {
		t.Errorf("pod 7: node %s, svc %s", p.Spec.NodeName, p.Labels["svc"])
	}
	if p.Namespace != Service(3).Namespace || !IsNamespace(p.Namespace) {
		t.Errorf("pod 7 in namespace %q, its Service in %q", p.Namespace, Service(3).Namespace)
	}
}

// The shape spreads 10,000 Services over 100 namespaces of 100, each with its
// pods; a pod outlives its node's missed heartbeats.
func TestNamespaces(t *testing.T) {
	s := Shape{Nodes: 1000, Pods: 50000, Services: 10000}
	if n := s.Namespaces(); n != 100 {
		t.Errorf("%d namespaces, want 100", n)
	}
	if n := (Shape{Nodes: 1, Pods: 101, Services: 101}).Namespaces(); n != 2 {
		t.Errorf("101 Services in %d namespaces, want 2", n)
	}
	if got, want := Service(150).Namespace, NamespaceName(1); got != want {
		t.Errorf("Service 150 in %s, want %s", got, want)
	}
	if got, want := s.Pod(20150).Namespace, NamespaceName(1); got != want { // Service 150's pod
		t.Errorf("pod 20150 in %s, want %s", got, want)
	}
	evictions := map[string]bool{corev1.TaintNodeNotReady: false, corev1.TaintNodeUnreachable: false}
	for _, tol := range s.Pod(0).Spec.Tolerations {
		if _, ok := evictions[tol.Key]; ok && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds == nil {
			evictions[tol.Key] = true
		}
	}
	for k, ok := range evictions {
		if !ok {
			t.Errorf("a simulated pod does not tolerate %s forever: the controller-manager evicts it when kwok renews its node late", k)
		}
	}
}

// TestReadyPatch checks the status patch ReadyAgain sends: both readiness conditions
// True, as a strategic merge of the conditions list by type.
func TestReadyPatch(t *testing.T) {
	b, err := readyPatch(time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status corev1.PodStatus `json:"status"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := map[corev1.PodConditionType]bool{corev1.PodReady: true, corev1.ContainersReady: true}
	for _, c := range p.Status.Conditions {
		if !want[c.Type] || c.Status != corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
			t.Errorf("condition %+v: want Ready or ContainersReady, True, with a transition time", c)
		}
		delete(want, c.Type)
	}
	if len(want) > 0 {
		t.Errorf("%s: conditions missing: %v", b, want)
	}
	pod := &corev1.Pod{Status: p.Status}
	if !k8s.PodReady(pod) {
		t.Errorf("podReady is false after the patch's conditions")
	}
	if k8s.PodReady(&corev1.Pod{}) {
		t.Errorf("podReady is true for a pod without conditions")
	}
}
