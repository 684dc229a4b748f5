package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/policy"
	"github.com/myelin-net/myelin/internal/routing"
)

// A compromised node writes its pods' status: a pod claiming another node's pod's
// address, an outside address, or an address in a PodCIDR its node lost to an older
// Node is no peer in policy; pods in their own node's range, and this node's pods,
// are. A Node's change is seen at the next computation, and each refusal logged once.
func TestPolicyRefusesPodsOutsideTheirNodesRange(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []*corev1.Node{
		testNode("n1", "198.18.0.11", "10.244.0.0/24", 1),
		testNode("n2", "198.18.0.12", "10.244.1.0/24", 2),
		testNode("liar", "198.18.0.250", "10.244.1.0/25", time.Now().Unix()),
	} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	w := &nodeWatch{lister: corelisters.NewNodeLister(idx)}
	r := newPodRanges(w, routing.Local{Name: "n1", IP: netip.MustParseAddr("198.18.0.11"),
		PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")},
		slog.New(slog.NewTextHandler(&logs, nil)))
	pod := func(name, node, ip string) policy.Pod {
		return policy.Pod{Namespace: "prod", Name: name, Node: node, IP: netip.MustParseAddr(ip)}
	}
	pods := func() []policy.Pod {
		return []policy.Pod{
			pod("local", "n1", "10.244.0.5"),
			pod("remote", "n2", "10.244.1.7"),
			pod("steals-local", "n2", "10.244.0.5"), // this node's pod's address
			pod("outside", "n2", "198.51.100.7"),    // an outside host as a pod
			pod("liars-pod", "liar", "10.244.1.9"),  // the range went to n2, created first
			pod("unknown-node", "n9", "10.244.9.1"), // no such Node
			pod("n3-early", "n3", "10.244.3.4"),     // n3 has no PodCIDR yet
			pod("local-odd", "n1", "10.244.200.1"),  // this node's: its CNI gave it
		}
	}
	names := func(ps []policy.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(r.check(pods())), []string{"local", "local-odd", "remote"}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "is no peer in policy"); n != 5 {
		t.Errorf("%d refusals logged, want 5:\n%s", n, logs.String())
	}
	logs.Reset()
	r.check(pods())
	if logs.Len() != 0 {
		t.Errorf("the same refusals logged again:\n%s", logs.String())
	}
	if err := idx.Add(testNode("n3", "198.18.0.13", "10.244.3.0/24", 3)); err != nil {
		t.Fatal(err)
	}
	w.kick()
	if got := names(r.check(pods())); !slices.Contains(got, "n3-early") {
		t.Errorf("after n3 got its PodCIDR: kept %v, want n3-early among them", got)
	}
	// A flood of refusals (a migration from a CNI with other addresses) logs a few by
	// name and counts the rest.
	logs.Reset()
	var flood []policy.Pod
	for i := range 3 * podRangesLogMax {
		flood = append(flood, pod(fmt.Sprintf("other-%02d", i), "n2", fmt.Sprintf("192.168.7.%d", i)))
	}
	r.check(flood)
	if n := strings.Count(logs.String(), "is no peer in policy"); n != podRangesLogMax || !strings.Contains(logs.String(), "pods=32") {
		t.Errorf("%d refusals logged by name, want %d and the other 32 counted:\n%s", n, podRangesLogMax, logs.String())
	}
}
