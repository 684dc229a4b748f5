package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// TestLabMyelinFragments: large UDP through a ClusterIP (a 3,000-byte request and a
// 6,000-byte answer, both fragmented at the pods' MTU, as a big DNS answer is) arrives
// whole, from a client on a node with BPF host routing (node-1) and one with legacy
// host routing (node-2), to backends on both nodes, also once NetworkPolicies isolate
// clients and servers with rules on the port; and a UDP datagram to a ClusterIP
// whose backend listens on nothing comes back as ECONNREFUSED on the client's
// connected socket: the backend's ICMP port unreachable was translated back to the
// ClusterIP it was about. In native routing and in tunnel mode (pods' route MTU 1450,
// fragments carried in VXLAN).
func TestLabMyelinFragments(t *testing.T) {
	requireRoot(t)
	for _, profile := range []string{"native", "tunnel"} {
		t.Run(profile, func(t *testing.T) { checkFragments(t, profile) })
	}
}

// isolatedFragments is TestLabMyelinFragments with clients and servers isolated by
// rules on the port. Later fragments carry no ports: each policy check passes them
// where it passed their first fragment (an all-ports rule can't be why). The deaf
// backend's port unreachable enters its isolated client as a tracked reply would.
// Each isolation is seen enforced first, on both nodes, so that nothing passes for
// a policy not applied yet.
func isolatedFragments(t *testing.T, cs kubernetes.Interface, big, deaf string) {
	isolateBigUDP(t, cs)
	ip := map[string]string{}
	for sel, n := range map[string]int{"app=big": 2, "app=client": 1, "app=client2": 1, "app=deaf": 1} {
		for _, p := range runningPods(t, cs, sel, n) {
			ip[p.Name] = p.Status.PodIP
		}
	}
	eventually(t, 90*time.Second, "the policies enforced", func(context.Context) (bool, string) {
		var open []string
		for _, probe := range [][2]string{
			// Each would be answered (or refused) without its policy.
			{"client", ip["big-1"] + ":8081"}, {"client2", ip["big-2"] + ":8081"}, // clients' egress: UDP 8080 only
			{"deaf", ip["client"] + ":9"}, {"deaf", ip["client2"] + ":9"}, // clients' ingress: replies only
			{"deaf", ip["big-1"] + ":8080"}, {"deaf", ip["big-2"] + ":8080"}, // servers' ingress: the clients only
			{"big-1", ip["deaf"] + ":9"}, {"big-2", ip["deaf"] + ":9"}, // servers' egress: replies only
		} {
			if res := bigUDP(t, probe[0], probe[1]); res.Refused || res.Received != 0 {
				open = append(open, fmt.Sprintf("%s to %s: %+v", probe[0], probe[1], res))
			}
		}
		return len(open) == 0, "answered (want no answer): " + strings.Join(open, "; ")
	})
	bigUDPBothWays(t, big)
	for _, c := range []string{"client", "client2"} {
		if res := udpFlow(t, c, deaf+":80"); res.Refused != 1 {
			t.Errorf("%s (isolated): UDP to %s (backend with no listener): %+v, want ECONNREFUSED", c, deaf, res)
		}
	}
}

// udpFlow runs `lab udp-flows` (one flow) in pod to target.
func udpFlow(t *testing.T, pod, target string) labtools.UDPFlowsResult {
	t.Helper()
	out, err := inPod(pod, myelinBin, "lab", "udp-flows", "--to", target, "--flows", "1", "--timeout", "6s")
	var res labtools.UDPFlowsResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("%s: udp-flows to %s: %v %s", pod, target, err, out)
	}
	return res
}

// bigUDPBothWays sends 20 fragmented requests from each client to ClusterIP big and
// requires each whole, and its fragmented reply whole, from both backends.
func bigUDPBothWays(t *testing.T, big string) {
	t.Helper()
	for _, c := range []string{"client", "client2"} {
		seen := map[string]int{}
		// Each run is a new socket, so a new flow and a new backend choice.
		for i := 0; i < 20; i++ {
			res := bigUDP(t, c, big+":80")
			if !res.RequestIntact || !res.ReplyIntact || res.Received != 6000 {
				t.Fatalf("%s: udp-big to %s, try %d: %+v: want the 3,000-byte request and the 6,000-byte reply whole", c, big, i, res)
			}
			seen[res.Server]++
		}
		expectServers(t, "fragmented UDP from "+c, seen, "big-1", "big-2")
	}
}

// bigUDP runs `lab udp-big` (3,000 bytes out, 6,000 asked back) in pod to target.
func bigUDP(t *testing.T, pod, target string) labtools.BigUDPResult {
	t.Helper()
	out, err := inPod(pod, myelinBin, "lab", "udp-big", "--to", target, "--send", "3000", "--reply", "6000", "--timeout", "3s")
	var res labtools.BigUDPResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("%s: udp-big to %s: %v %s", pod, target, err, out)
	}
	return res
}

// isolateBigUDP isolates the servers (app=big) both ways, admitting the clients on UDP
// 8080 and letting nothing out but the replies, and the clients both ways, allowing
// them out to UDP 8080 of the servers and of app=deaf, and nothing in but the replies.
// With both ends isolated on one node a reply passes the client's check on the
// server's lookup.
func isolateBigUDP(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	udp := corev1.ProtocolUDP
	port := []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &intstr.IntOrString{IntVal: 8080}}}
	clients := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"client", "client2"}}}}
	servers := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "big"}}
	deaf := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "deaf"}}
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "big-from-clients"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *servers, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: clients}}, Ports: port}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "clients-to-big"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *clients, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: servers}, {PodSelector: deaf}}, Ports: port}}}},
	} {
		if _, err := cs.NetworkingV1().NetworkPolicies("default").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkFragments is TestLabMyelinFragments in a lab of profile.
func checkFragments(t *testing.T, profile string) {
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", profile)
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createNodeConfig(t, "legacy-node-2", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"host-routing": "legacy"})
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "host-routing is legacy")

	serve := []string{myelinBin, "lab", "serve", "--listen", ":8080"}
	createPod(t, cs, "big-1", n1, map[string]string{"app": "big"}, serve...)
	createPod(t, cs, "big-2", n2, map[string]string{"app": "big"}, serve...)
	createPod(t, cs, "deaf", n2, map[string]string{"app": "deaf"}, "sleep", "infinity")
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "client2", n2, map[string]string{"app": "client2"}, "sleep", "infinity")
	runningPods(t, cs, "app=big", 2)
	runningPods(t, cs, "app=deaf", 1)
	runningPods(t, cs, "app=client", 1)
	runningPods(t, cs, "app=client2", 1)
	big := createService(t, cs, "big", "big", nil).Spec.ClusterIP
	deaf := createService(t, cs, "deaf", "deaf", nil).Spec.ClusterIP
	for _, n := range []string{n1, n2} {
		waitProgrammed(t, n, big+":80/UDP", 2)
		waitProgrammed(t, n, deaf+":80/UDP", 1)
	}

	for _, c := range []string{"client", "client2"} {
		out, err := inPod(c, "cat", "/sys/class/net/eth0/mtu")
		if mtu, perr := strconv.Atoi(strings.TrimSpace(out)); err != nil || perr != nil || mtu >= 3000 {
			t.Fatalf("%s: eth0 MTU %q (%v): want one below 3000, so the request is fragmented", c, out, err)
		}
	}

	t.Run("fragmented UDP both ways through a ClusterIP", func(t *testing.T) { bigUDPBothWays(t, big) })

	t.Run("ICMP port unreachable from a backend reaches the client", func(t *testing.T) {
		for _, c := range []corev1.Pod{runningPods(t, cs, "app=client", 1)[0], runningPods(t, cs, "app=client2", 1)[0]} {
			node := c.Spec.NodeName
			rejects := counter(t, node, "from-pod", "DROP_SVC_NO_BACKEND")
			if res := udpFlow(t, c.Name, deaf+":80"); res.Refused != 1 {
				t.Errorf("%s: UDP to %s (backend with no listener): %+v, want ECONNREFUSED", c.Name, deaf, res)
			}
			// The answer came from the backend's kernel, not from the datapath's reject.
			if got := counter(t, node, "from-pod", "DROP_SVC_NO_BACKEND"); got != rejects {
				t.Errorf("%s: DROP_SVC_NO_BACKEND grew from %d to %d: the service has a backend", node, rejects, got)
			}
		}
	})

	t.Run("fragmented UDP and ICMP errors through isolated pods", func(t *testing.T) { isolatedFragments(t, cs, big, deaf) })
}
