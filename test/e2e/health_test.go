package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// healthTimeout bounds the wait for the matrix to show a change: generous (a round
// is 10 s in a small cluster); the test asserts what the matrix shows, not how fast.
const healthTimeout = 3 * time.Minute

// TestLabHealth: every agent of a 3-node lab reaches the others over the node and
// the pod network; a blackhole for node-2's IP in node-1's netns is named by node-1's
// matrix as node-2 failing over the node network only (the pod route goes via the
// neighbour, untouched), one for node-2's PodCIDR adds the pod network; the CLI
// names it; removing both heals the matrix, which keeps the last failure.
func TestLabHealth(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin")
	n1, n2, n3 := labplan.NodeName(1), labplan.NodeName(2), labplan.NodeName(3)
	for _, n := range []string{n1, n2, n3} {
		waitHealth(t, n, "every peer reachable", allReachable(2))
	}
	if out, err := myelin("health", "--node", n1); err != nil || !healthRow(out, n2, "ok", "ok") || !healthRow(out, n3, "ok", "ok") {
		t.Errorf("myelin health --node %s: %v\n%s; want %s and %s ok via node and pod network", n1, err, out, n2, n3)
	}

	node2, err := cs.CoreV1().Nodes().Get(context.Background(), n2, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeRule := []string{"to", k8s.NodeInternalIP(node2).String() + "/32", "priority", "50", "blackhole"}
	podRule := []string{"to", node2.Spec.PodCIDR, "priority", "51", "blackhole"}
	t.Cleanup(func() { delRule(n1, nodeRule); delRule(n1, podRule) })
	addRule(t, n1, nodeRule)
	waitHealth(t, n1, n2+" failing via the node network only", peerState(n2, api.PathFailing, api.PathOK))
	addRule(t, n1, podRule)
	waitHealth(t, n1, n2+" failing via node and pod network", peerState(n2, api.PathFailing, api.PathFailing))
	waitHealth(t, n1, n3+" still reachable", peerState(n3, api.PathOK, api.PathOK))
	out, err := myelin("status", "--node", n1, "--health")
	if err != nil || !strings.Contains(out, n2+" (node and pod network)") || !healthRow(out, n2, "failing", "failing") || !healthRow(out, n3, "ok", "ok") {
		t.Errorf("myelin status --health --node %s: %v\n%s; want %s named unreachable on both networks, %s ok", n1, err, out, n2, n3)
	}

	delRule(n1, nodeRule)
	delRule(n1, podRule)
	for _, n := range []string{n1, n2, n3} {
		waitHealth(t, n, "every peer reachable again", allReachable(2))
	}
	m := healthOf(t, n1)
	for _, p := range m.Peers {
		if p.Name == n2 && (p.PodHTTP.LastFailure.IsZero() || p.PodHTTP.LastError == "" || p.ICMP.LastFailure.IsZero()) {
			t.Errorf("%s after healing: %+v; want the last failure kept", n2, p)
		}
	}
	labDown(t)
}

// healthOf is a lab node's health matrix.
func healthOf(t *testing.T, node string) api.HealthMatrix {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := api.NewClient(api.NodeSocket(node)).HealthMatrix(ctx)
	if err != nil {
		t.Fatalf("health matrix of %s: %v", node, err)
	}
	return m
}

// waitHealth polls node's matrix until done says so (bounded by healthTimeout).
func waitHealth(t *testing.T, node, what string, done func(api.HealthMatrix) bool) {
	t.Helper()
	eventually(t, healthTimeout, node+": "+what, func(context.Context) (bool, string) {
		m := healthOf(t, node)
		return done(m), fmt.Sprintf("%+v", m)
	})
}

func allReachable(peers int) func(api.HealthMatrix) bool {
	return func(m api.HealthMatrix) bool {
		n := 0
		for _, p := range m.Peers {
			if p.Reachable() {
				n++
			}
		}
		return len(m.Peers) == peers && n == peers
	}
}

func peerState(peer, viaNode, viaPod string) func(api.HealthMatrix) bool {
	return func(m api.HealthMatrix) bool {
		for _, p := range m.Peers {
			if p.Name == peer {
				return p.ViaNode() == viaNode && p.ViaPod() == viaPod
			}
		}
		return false
	}
}

// healthRow is whether the CLI's table has peer's row with these states.
func healthRow(out, peer, viaNode, viaPod string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[0] == peer {
			return f[2] == viaNode && f[5] == viaPod
		}
	}
	return false
}

func addRule(t *testing.T, node string, rule []string) {
	t.Helper()
	if out, err := inNode(node, append([]string{"ip", "rule", "add"}, rule...)...); err != nil {
		t.Fatalf("ip rule add %v in %s: %v\n%s", rule, node, err, out)
	}
}

func delRule(node string, rule []string) {
	_, _ = inNode(node, append([]string{"ip", "rule", "del"}, rule...)...)
}

// TestLabHealthTunnel: in tunnel mode the pod-network probe rides VXLAN between the
// node IPs (and passes the receiver's tunnel peer check), so a blackhole for node-2's
// IP in node-1's netns fails node-2 on both networks; removing it heals.
func TestLabHealthTunnel(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "tunnel")
	n1, n2, n3 := labplan.NodeName(1), labplan.NodeName(2), labplan.NodeName(3)
	for _, n := range []string{n1, n2, n3} {
		waitHealth(t, n, "every peer reachable", allReachable(2))
	}
	node2, err := cs.CoreV1().Nodes().Get(context.Background(), n2, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rule := []string{"to", k8s.NodeInternalIP(node2).String() + "/32", "priority", "50", "blackhole"}
	t.Cleanup(func() { delRule(n1, rule) })
	addRule(t, n1, rule)
	waitHealth(t, n1, n2+" failing via node and pod network", peerState(n2, api.PathFailing, api.PathFailing))
	waitHealth(t, n1, n3+" still reachable", peerState(n3, api.PathOK, api.PathOK))
	delRule(n1, rule)
	waitHealth(t, n1, "every peer reachable again", allReachable(2))
	labDown(t)
}
