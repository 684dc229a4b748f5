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

// udpFlowsFrom opens n UDP flows from a pod to target, from local ports firstPort
// on (0: the kernel's choice), and returns how many were answered.
func udpFlowsFrom(t *testing.T, pod, target string, n, firstPort int) int {
	t.Helper()
	out, err := inPod(pod, myelinBin, "lab", "udp-flows", "--to", target, "--flows", fmt.Sprint(n),
		"--first-port", fmt.Sprint(firstPort), "--timeout", "3s")
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

// allowIngressFrom isolates the pods labelled app=to for ingress, allowing only the
// pods labelled with one of the apps from.
func allowIngressFrom(t *testing.T, cs kubernetes.Interface, to string, from ...string) {
	t.Helper()
	var peers []networkingv1.NetworkPolicyPeer
	for _, f := range from {
		peers = append(peers, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": f}}})
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: to + "-from-" + strings.Join(from, "-")},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": to}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers}},
		},
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("default").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLabMyelinPodTableFloods: one pod floods each of node-1's shared tables a pod
// can fill for the others, far beyond its share (by a NodeConfig: policy-ct-max
// 1024, policy-ct-pod-max 100, nat-pod-max 100, lb-ct-pod-max 100, socket-LB off). A
// pod whose egress policy allows a server (whose ingress policy admits it) opens 600
// UDP flows to it: they count against the pod that opened them, so the server,
// flooded, still opens flows of its own; a pod without
// policy opens 600 to the external host (masqueraded), another 600 to the server's
// ClusterIP. Within a GC round the agent names each in `myelin status` (and the first
// in `myelin endpoints`); from then on their new flows (from other source ports) are
// dropped, DROP_POLICY_CT_BUDGET, DROP_NAT_BUDGET and DROP_SVC_CT_BUDGET, none
// answered, while another pod of the node still opens the same flows.
func TestLabMyelinPodTableFloods(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	n1 := labplan.NodeName(1)
	createNodeConfig(t, "small-policy-ct", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"policy-ct-max": "1024", "policy-ct-pod-max": "100", "nat-pod-max": "100", "lb-ct-pod-max": "100",
			"bpf-lb-sock": "false"}) // pods' Service flows take the tc path and its table
	restartAgent(t, n1)
	createPod(t, cs, "web", n1, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web")
	createPod(t, cs, "guarded", n1, map[string]string{"app": "guarded"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "guarded")
	createPod(t, cs, "flood", n1, map[string]string{"app": "flood"}, "sleep", "infinity")
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "natflood", n1, map[string]string{"app": "natflood"}, "sleep", "infinity")
	createPod(t, cs, "other", n1, map[string]string{"app": "other"}, "sleep", "infinity")
	createPod(t, cs, "svcflood", n1, map[string]string{"app": "svcflood"}, "sleep", "infinity")
	svc := createService(t, cs, "web", "web", nil)
	runningPods(t, cs, "app=web", 1)
	target := runningPods(t, cs, "app=guarded", 1)[0].Status.PodIP + ":8080"
	for _, app := range []string{"flood", "client", "natflood", "other", "svcflood"} {
		runningPods(t, cs, "app="+app, 1)
	}
	allowEgressTo(t, cs, "flood", "guarded")
	allowEgressTo(t, cs, "client", "guarded")
	allowIngressFrom(t, cs, "guarded", "flood", "client")
	eventually(t, 30*time.Second, "both pods egress-isolated, guarded ingress-isolated", func(context.Context) (bool, string) {
		out, err := myelin("endpoints", "--node", n1)
		return err == nil && strings.Count(out, " on ") >= 3, out
	})

	floodPastBudget(t, n1, "flood", "client", target, "pod default/flood: held ", "over policy-ct-pod-max 100")
	if out, err := myelin("endpoints", "--node", n1); err != nil || !strings.Contains(out, "WARNING: default/flood: held ") {
		t.Errorf("myelin endpoints: %v\n%s\nwant a warning naming default/flood", err, out)
	}
	// guarded accepted all 600 (its ingress check tracked them too) but opened
	// none: it is not over its budget, and its own new flows (tracked for their
	// replies, which its ingress policy would not admit) go on.
	external := labplan.DefaultAddressing().ExternalServerIP().String() + ":80"
	if out, err := myelin("status", "--node", n1); err != nil || strings.Contains(out, "pod default/guarded") {
		t.Errorf("myelin status after flood's 600 flows into guarded: %v\n%s\nwant guarded not named over its budget", err, out)
	}
	if got := udpFlowsFrom(t, "guarded", external, 50, 30000); got != 50 {
		t.Errorf("guarded, flooded by a pod of its node that its policy admits: %d of 50 new flows of its own to %s answered, want all", got, external)
	}
	floodPastBudget(t, n1, "natflood", "other", external, "pod default/natflood held ", "over nat-pod-max 100")
	clusterIP := svc.Spec.ClusterIP + ":80"
	waitProgrammed(t, n1, clusterIP+"/UDP", 1)
	floodPastBudget(t, n1, "svcflood", "other", clusterIP, "pod default/svcflood held ", "over lb-ct-pod-max 100")
	for reason, want := range map[string]uint64{"DROP_POLICY_CT_BUDGET": 50, "DROP_NAT_BUDGET": 50, "DROP_SVC_CT_BUDGET": 50} {
		if got := countedDrops(t, n1, reason); got < want {
			t.Errorf("node-1 counted %d %s packets, want at least the 50 flows' first datagrams", got, reason)
		}
	}
	labDown(t)
}

// TestLabMyelinPodTableFloodsTunnel: in tunnel mode a pod of another node that
// floods a pod of node-1 pays for the flood itself (node-1: policy-ct-max 1024,
// policy-ct-pod-max 100). flood, on node-2, opens 600 UDP flows to guarded on
// node-1, whose ingress policy admits it: node-1's agent names flood with its node
// in `myelin status`, its next 50 flows are dropped (DROP_POLICY_CT_BUDGET), while
// client, another pod of node-2, still opens the same flows, guarded is not named,
// and guarded's own 50 new flows to a server on node-2 are answered. The peer rule
// vouches for the sender: an address of the cluster CIDR comes out of the tunnel
// only from the node owning its PodCIDR, which checked it where it left the pod.
func TestLabMyelinPodTableFloodsTunnel(t *testing.T) {
	floodGuarded(t, "tunnel", 2)
}

// TestLabMyelinPodTableFloodsTunnelLegacy: the same with legacy host routing,
// where the kernel's VXLAN device decapsulates and the stack delivers: what
// entered node-1 through myelin_vxlan passed the same peer rule there
// (myelin_from_overlay), so flood pays as where BPF delivers.
func TestLabMyelinPodTableFloodsTunnelLegacy(t *testing.T) {
	floodGuarded(t, "tunnel-legacy", 2)
}

// TestLabMyelinPodTableFloodsLegacy: with legacy host routing the stack delivers
// what flood, a pod of node-1 without any policy, sends to guarded; the packets
// entered the node on flood's own veth, where myelin_from_pod checked their
// source, so flood pays for its 600 flows, as with BPF host routing
// (floodGuarded, all pods on node-1).
func TestLabMyelinPodTableFloodsLegacy(t *testing.T) {
	floodGuarded(t, "native-legacy", 1)
}

// floodGuarded runs a lab of profile with guarded (ingress-isolated, admitting
// flood and client) on node-1 and flood, client and a server on node floodNode;
// node-1 has policy-ct-max 1024 and policy-ct-pod-max 100. flood's 600 flows into
// guarded get flood named over its budget and its next flows dropped, while
// client's go on, guarded is not named and its own flows to the server are
// answered.
func floodGuarded(t *testing.T, profile string, floodNode int) {
	requireRoot(t)
	cs := labUp(t, "--nodes", fmt.Sprint(floodNode), "--cni", "myelin", "--profile", profile)
	n1, nf := labplan.NodeName(1), labplan.NodeName(floodNode)
	createNodeConfig(t, "small-policy-ct", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"policy-ct-max": "1024", "policy-ct-pod-max": "100"})
	restartAgent(t, n1)
	createPod(t, cs, "guarded", n1, map[string]string{"app": "guarded"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "guarded")
	createPod(t, cs, "web", nf, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web")
	createPod(t, cs, "flood", nf, map[string]string{"app": "flood"}, "sleep", "infinity")
	createPod(t, cs, "client", nf, map[string]string{"app": "client"}, "sleep", "infinity")
	target := runningPods(t, cs, "app=guarded", 1)[0].Status.PodIP + ":8080"
	web := runningPods(t, cs, "app=web", 1)[0].Status.PodIP + ":8080"
	runningPods(t, cs, "app=flood", 1)
	runningPods(t, cs, "app=client", 1)
	allowIngressFrom(t, cs, "guarded", "flood", "client")
	eventually(t, 30*time.Second, "guarded ingress-isolated", func(context.Context) (bool, string) {
		out, err := myelin("endpoints", "--node", n1)
		return err == nil && strings.Count(out, " on ") >= 1, out
	})

	named := []string{"pod default/flood: held ", "over policy-ct-pod-max 100"}
	if floodNode != 1 {
		named = []string{"pod default/flood (", ") of node " + nf + ": held ", "over policy-ct-pod-max 100"}
	}
	floodPastBudget(t, n1, "flood", "client", target, named...)
	if out, err := myelin("status", "--node", n1); err != nil || strings.Contains(out, "pod default/guarded") {
		t.Errorf("myelin status after flood's 600 flows into guarded: %v\n%s\nwant guarded not named over its budget", err, out)
	}
	if got := udpFlowsFrom(t, "guarded", web, 50, 30000); got != 50 {
		t.Errorf("guarded, flooded by a pod its policy admits: %d of 50 new flows of its own to %s answered, want all", got, web)
	}
	if got := countedDrops(t, n1, "DROP_POLICY_CT_BUDGET"); got < 50 {
		t.Errorf("node-1 counted %d DROP_POLICY_CT_BUDGET packets, want at least flood's 50 flows' first datagrams", got)
	}
	labDown(t)
}

// floodPastBudget has pod flood open 600 UDP flows to target, waits until `myelin
// status` on node shows every one of named (the pod over its budget), and then
// requires 50 new flows of flood (from other ports: none is one of its open flows)
// unanswered and the same 50 of pod control answered.
func floodPastBudget(t *testing.T, node, flood, control, target string, named ...string) {
	t.Helper()
	if got := udpFlowsFrom(t, flood, target, 600, 20000); got != 600 {
		t.Fatalf("%s's first 600 flows to %s: %d answered, want all", flood, target, got)
	}
	eventually(t, 30*time.Second, flood+" named over its budget in myelin status", func(context.Context) (bool, string) {
		out, err := myelin("status", "--node", node)
		for _, n := range named {
			if err != nil || !strings.Contains(out, n) {
				return false, out
			}
		}
		return true, ""
	})
	if got := udpFlowsFrom(t, flood, target, 50, 30000); got != 0 {
		t.Errorf("%s over its budget: %d of 50 new flows to %s answered, want none", flood, got, target)
	}
	if got := udpFlowsFrom(t, control, target, 50, 30000); got != 50 {
		t.Errorf("%s within its budget: %d of 50 new flows to %s answered, want all", control, got, target)
	}
}

// countedDrops sums a node's datapath counters of reason over every direction.
func countedDrops(t *testing.T, node, reason string) uint64 {
	t.Helper()
	var n uint64
	for _, c := range agentStatus(t, node).Counters {
		if c.Reason == reason {
			n += c.Packets
		}
	}
	return n
}

// TestLabMyelinPolicyCTEvictions: a pod whose egress policy allows a server opens
// twice as many UDP flows as node-1's connection table holds (policy-ct-max 1024,
// no per-pod budget). Every flow is still answered (a flow pushed out of the table
// is judged again by its next datagram, and the policy allows it), and the agent
// says what happened: `myelin status` warns of connections in use pushed out, and
// myelin_policy_ct_evictions_total{kind="in-use"} counts them (a scrape promtool
// passes).
func TestLabMyelinPolicyCTEvictions(t *testing.T) {
	requireRoot(t)
	bin := promtoolBin(t)
	cs := labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	n1 := labplan.NodeName(1)
	createNodeConfig(t, "tiny-policy-ct", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"policy-ct-max": "1024", "policy-ct-pod-max": "0"})
	restartAgent(t, n1)
	createPod(t, cs, "web", n1, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web")
	createPod(t, cs, "flood", n1, map[string]string{"app": "flood"}, "sleep", "infinity")
	target := runningPods(t, cs, "app=web", 1)[0].Status.PodIP + ":8080"
	runningPods(t, cs, "app=flood", 1)
	allowEgressTo(t, cs, "flood", "web")
	eventually(t, 30*time.Second, "flood egress-isolated", func(context.Context) (bool, string) {
		out, err := myelin("endpoints", "--node", n1)
		return err == nil && strings.Count(out, " on ") >= 1, out
	})
	if out, err := myelin("status", "--node", n1); err != nil || strings.Contains(out, "pushed out") {
		t.Fatalf("myelin status before the flood: %v\n%s\nwant no eviction warning", err, out)
	}

	if got := udpFlowsFrom(t, "flood", target, 2048, 20000); got != 2048 {
		t.Errorf("2048 allowed flows through a table of 1024: %d answered, want all", got)
	}
	eventually(t, 30*time.Second, "the eviction warning in myelin status", func(context.Context) (bool, string) {
		out, err := myelin("status", "--node", n1)
		return err == nil && strings.Contains(out, "connections in use in the last minute") && strings.Contains(out, "raise policy-ct-max"), out
	})
	m := scrape(t, bin, n1, 9962)
	idle := sumOf(m, "myelin_policy_ct_evictions_total", map[string]string{"kind": "idle"})
	inUse := sumOf(m, "myelin_policy_ct_evictions_total", map[string]string{"kind": "in-use"})
	t.Logf("myelin_policy_ct_evictions_total: idle %v, in-use %v", idle, inUse)
	if inUse < 1 {
		t.Errorf("myelin_policy_ct_evictions_total{kind=\"in-use\"} = %v after 2048 answered flows through 1024 slots, want > 0", inUse)
	}
	labDown(t)
}
