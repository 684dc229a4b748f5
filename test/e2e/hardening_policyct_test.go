package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// udpFlowsFrom opens n UDP flows from a pod to target and returns how many were
// answered.
func udpFlowsFrom(t *testing.T, pod, target string, n int) int {
	t.Helper()
	out, err := inPod(pod, myelinBin, "lab", "udp-flows", "--to", target, "--flows", fmt.Sprint(n), "--timeout", "3s")
	var res labtools.UDPFlowsResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Flows != n {
		t.Fatalf("udp-flows from %s to %s: %v %q", pod, target, err, out)
	}
	return res.Replies
}

// allowEgressTo isolates the pods labelled app=from for egress, allowing only the
// pods labelled app=to.
func allowEgressTo(t *testing.T, cs kubernetes.Interface, from, to string) {
	t.Helper()
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: from + "-to-" + to},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": from}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": to}}}}}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("default").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLabMyelinPolicyCTFlood: a pod whose egress policy allows two servers opens UDP
// flows to one from 600 source ports, far beyond its share of node-1's NetworkPolicy
// connection table (policy-ct-max 1024, policy-ct-pod-max 100 by a NodeConfig).
// Within a GC round the agent names it in `myelin status` and `myelin endpoints`; from
// then on its new flows (to the other server) are dropped as DROP_POLICY_CT_BUDGET,
// none answered, while another egress-isolated pod of the node still opens flows there.
func TestLabMyelinPolicyCTFlood(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	n1 := labplan.NodeName(1)
	createNodeConfig(t, "small-policy-ct", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"policy-ct-max": "1024", "policy-ct-pod-max": "100"})
	restartAgent(t, n1)
	createPod(t, cs, "web", n1, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web")
	createPod(t, cs, "web2", n1, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web2")
	createPod(t, cs, "flood", n1, map[string]string{"app": "flood"}, "sleep", "infinity")
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	webs := runningPods(t, cs, "app=web", 2)
	runningPods(t, cs, "app=flood", 1)
	runningPods(t, cs, "app=client", 1)
	allowEgressTo(t, cs, "flood", "web")
	allowEgressTo(t, cs, "client", "web")
	// The flood's later flows go to the other server: none can be one of its tracked
	// flows (a source port of the first 600 taken again).
	target, other := webs[0].Status.PodIP+":8080", webs[1].Status.PodIP+":8080"
	eventually(t, 30*time.Second, "both pods egress-isolated", func(context.Context) (bool, string) {
		out, err := myelin("endpoints", "--node", n1)
		return err == nil && strings.Count(out, " on ") >= 2, out
	})

	if got := udpFlowsFrom(t, "flood", target, 600); got != 600 {
		t.Fatalf("flood's first 600 flows: %d answered, want all (its policy allows them)", got)
	}
	eventually(t, 30*time.Second, "flood named over its budget in myelin status", func(context.Context) (bool, string) {
		out, err := myelin("status", "--node", n1)
		return err == nil && strings.Contains(out, "pod default/flood: held ") && strings.Contains(out, "over policy-ct-pod-max 100"), out
	})
	if out, err := myelin("endpoints", "--node", n1); err != nil || !strings.Contains(out, "WARNING: default/flood: held ") {
		t.Errorf("myelin endpoints: %v\n%s\nwant a warning naming default/flood", err, out)
	}
	if got := udpFlowsFrom(t, "flood", other, 50); got != 0 {
		t.Errorf("flood over its budget: %d of 50 new flows answered, want none", got)
	}
	if got := udpFlowsFrom(t, "client", other, 50); got != 50 {
		t.Errorf("client within its budget: %d of 50 new flows answered, want all", got)
	}
	var dropped uint64
	for _, c := range agentStatus(t, n1).Counters {
		if c.Reason == "DROP_POLICY_CT_BUDGET" && c.Direction == "from-pod" {
			dropped += c.Packets
		}
	}
	if dropped < 50 {
		t.Errorf("node-1 counted %d DROP_POLICY_CT_BUDGET packets from pods, want at least the 50 flows' first datagrams", dropped)
	}
	labDown(t)
}
