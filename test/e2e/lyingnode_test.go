package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// lyingNodeRefused creates a Node, as a forged or compromised one would be, whose
// PodCIDR is the lower half of node-2's (a more specific prefix would win every node's
// route lookup for those pods) at a free address of the nodes' segment: node-1 must
// install no route for it, keep node-2's, and name it in status; then it deletes it.
func lyingNodeRefused(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	node2, err := cs.CoreV1().Nodes().Get(ctx, n2, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := netip.MustParsePrefix(node2.Spec.PodCIDR)
	half := netip.PrefixFrom(own.Addr(), own.Bits()+1).String()
	liar := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lying-node"},
		Spec: corev1.NodeSpec{PodCIDR: half, PodCIDRs: []string{half},
			Taints: []corev1.Taint{{Key: "e2e/lying-node", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.250"}}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, liar, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "lying-node: refused: PodCIDR " + half + " of node lying-node overlaps " + own.String() + " of node " + n2
	eventually(t, time.Minute, "node-1 reports the lying Node as refused", func(context.Context) (bool, string) {
		st := agentStatus(t, n1)
		for _, u := range st.Routing.Unroutable {
			if strings.HasPrefix(u, want) {
				return true, u
			}
		}
		return false, strings.Join(st.Routing.Unroutable, "; ")
	})
	if out, _ := inNode(n1, "ip", "route", "show", half); strings.TrimSpace(out) != "" {
		t.Errorf("node-1 routes the lying Node's %s: %q", half, out)
	}
	if out, _ := inNode(n1, "ip", "route", "show", own.String()); !strings.Contains(out, "via 198.18.0.12") {
		t.Errorf("node-1 lost its route to node-2's %s: %q", own, out)
	}
	if st := agentStatus(t, n1); st.Routing.Routes != 2 {
		t.Errorf("node-1 has %d node routes with the lying Node, want 2", st.Routing.Routes)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, liar.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the deleted lying Node gone from node-1's status", func(context.Context) (bool, string) {
		st := agentStatus(t, n1)
		return len(st.Routing.Unroutable) == 0, strings.Join(st.Routing.Unroutable, "; ")
	})
}
