package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/policy/conformance"
)

// isolatedFromStart: a new pod that a policy isolates is isolated from its first
// packet. Each pod's command connects to y/a before anything else, as soon as CNI ADD
// has returned and long before the kubelet reports the pod's address; the pods a
// policy denies all egress (one per node) must be refused, and a pod of the same
// namespace that no policy selects (the control: a new pod's first connection works)
// must get through.
func (l *netpolLab) isolatedFromStart(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "fresh-no-egress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "fresh"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	since := time.Now()
	if _, err := l.cs.NetworkingV1().NetworkPolicies("x").Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.waitApplied(since); err != nil {
		t.Fatal(err)
	}
	target := "http://" + net.JoinHostPort(l.pods[conformance.PodRef{NS: "y", Pod: "a"}].Status.PodIP, "80") + "/"
	dir := t.TempDir()
	want := map[string]string{"fresh-1": "refused", "fresh-2": "refused", "open-1": "reached"}
	for name := range want {
		label := strings.TrimSuffix(strings.TrimSuffix(name, "-1"), "-2")
		out := filepath.Join(dir, name)
		spec := hostPod("first", "sh", "-c", fmt.Sprintf(
			"if curl -s -o /dev/null -m 3 %s; then r=reached; else r=refused; fi; echo $r > %s.tmp && mv %s.tmp %s; exec sleep 3600",
			target, out, out, out))
		spec.NodeName = l.nodes[0]
		if strings.HasSuffix(name, "-2") {
			spec.NodeName = l.nodes[1]
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "x", Labels: map[string]string{"pod": label}}, Spec: spec}
		if _, err := l.cs.CoreV1().Pods("x").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	eventually(t, podTimeout, "every new pod's first connection done", func(context.Context) (bool, string) {
		for name := range want {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				got[name] = strings.TrimSpace(string(b))
			}
		}
		return len(got) == len(want), fmt.Sprintf("%v", got)
	})
	if !maps.Equal(got, want) {
		t.Errorf("first connection of each new pod = %v, want %v (fresh-* are denied all egress from the start)", got, want)
	}
	for name := range want {
		if err := l.cs.CoreV1().Pods("x").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	if err := l.cs.NetworkingV1().NetworkPolicies("x").Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// operatorView checks what an operator sees with x/a isolated (only x/b
// in on TCP 80): myelin endpoints, myelin policy trace, and the drop of a
// denied packet in myelin monitor with both pods' names and the side.
func (l *netpolLab) operatorView(t *testing.T) {
	t.Helper()
	np := policyXAFromXB()
	since := time.Now()
	if _, err := l.cs.NetworkingV1().NetworkPolicies("x").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.waitApplied(since); err != nil {
		t.Fatal(err)
	}
	node := l.pods[conformance.PodRef{NS: "x", Pod: "a"}].Spec.NodeName
	out, err := myelin("endpoints", "--node", node)
	if err != nil || !regexpMatch(`(?m)^x/a\s+\S+\s+\d+\s+on\s+off\s+x/x-a-allows-x-b`, out) {
		t.Errorf("myelin endpoints --node %s: %v, want x/a with ingress on, egress off, its policy:\n%s", node, err, out)
	}
	t.Logf("myelin endpoints --node %s:\n%s", node, out)
	for _, c := range []struct{ from, want string }{
		{"x/b", "x/b -> x/a 80/TCP: ALLOWED"}, {"y/a", "x/b -> x/a 80/TCP: DENIED"},
	} {
		c.want = strings.Replace(c.want, "x/b", c.from, 1)
		out, err := myelin("policy", "trace", "--node", node, "--from", c.from, "--to", "x/a", "--port", "80/TCP")
		if err != nil || !strings.Contains(out, c.want) || !strings.Contains(out, "x/x-a-allows-x-b") {
			t.Errorf("myelin policy trace --from %s --to x/a: %v, want %q naming x/x-a-allows-x-b:\n%s", c.from, err, c.want, out)
		}
	}
	l.nodeProbes(t, node)
	l.monitorPolicyDrop(t, node)
	l.restartKeepsEnforcing(t, node)
}

// nodeProbes connects to x/a:80 (isolated, allowing only x/b) from x/a's
// node's own netns, as kubelet probes do: allowed (the host sent it). From
// the other node's netns it is denied: another node is not this node. Then
// the same with a global address on each node's lo (a BGP or VIP loopback),
// which the kernel picks as the source of x/a's node's connections to its
// pods (their routes name no source; checked with ip route get): the agent
// lists it among the node's addresses, so that node's probe still passes.
// The other node's probe stays denied whatever source it leaves with, also
// on a UDP tuple x/a's node tracked from that address (hostTupleRiding), and
// each node still reaches a pod of the other node that is not isolated.
func (l *netpolLab) nodeProbes(t *testing.T, node string) {
	t.Helper()
	podIP := l.pods[conformance.PodRef{NS: "x", Pod: "a"}].Status.PodIP
	target := net.JoinHostPort(podIP, "80")
	probe := func(how string) {
		for _, n := range l.nodes {
			got := probeConn(labplan.NetNSPath(n), corev1.ProtocolTCP, target)
			if want := n == node; got != want {
				t.Errorf("node %s -> x/a:80 (on %s)%s: allowed=%v, want %v (only x/a's own node is exempt)", n, node, how, got, want)
			}
		}
	}
	probe("")
	const loopback = "198.51.100.77"
	for _, n := range l.nodes {
		// replace: a run killed before its cleanup left it there
		if out, err := exec.Command("ip", "-n", n, "addr", "replace", loopback+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Fatalf("add %s to %s's lo: %v: %s", loopback, n, err, out)
		}
		defer func() { _ = exec.Command("ip", "-n", n, "addr", "del", loopback+"/32", "dev", "lo").Run() }()
	}
	out, err := exec.Command("ip", "-n", node, "route", "get", podIP).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "src "+loopback+" ") {
		t.Fatalf("%s's route to x/a: %v: %s; want the source %s (else this probe does not test the node's other addresses)", node, err, out, loopback)
	}
	for _, n := range l.nodes {
		eventually(t, time.Minute, "agent on "+n+" lists "+loopback+" among the node's addresses", func(ctx context.Context) (bool, string) {
			st, err := api.NewClient(api.NodeSocket(n)).Policy(ctx)
			return err == nil && slices.Contains(st.HostAddresses, loopback), fmt.Sprintf("%v %v", st.HostAddresses, err)
		})
	}
	probe(", with " + loopback + " on the nodes' lo")
	for _, n := range l.nodes {
		if n != node {
			hostTupleRiding(t, node, n, netip.MustParseAddr(loopback), target, l.profile == "native")
		}
	}
	// The node's own traffic to another node's pod (not isolated) must still
	// reach it: in tunnel mode the inner source must be the node IP, which
	// the other node's tunnel peer rule accepts (the tunnel routes name it).
	for _, n := range l.nodes {
		for _, ref := range slices.SortedFunc(maps.Keys(l.pods), func(a, b conformance.PodRef) int { return strings.Compare(a.String(), b.String()) }) {
			if pod := l.pods[ref]; pod.Spec.NodeName != n && ref != (conformance.PodRef{NS: "x", Pod: "a"}) {
				if !probeConn(labplan.NetNSPath(n), corev1.ProtocolTCP, net.JoinHostPort(pod.Status.PodIP, "80")) {
					t.Errorf("node %s -> %s:80 on node %s, with %s on the nodes' lo: not reached", n, ref, pod.Spec.NodeName, loopback)
				}
				break
			}
		}
	}
}

func policyXAFromXB() *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(80)
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "x-a-allows-x-b"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
			}},
		}}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// monitorPolicyDrop connects y/a -> x/a:80 while myelin monitor watches
// drops on x/a's node: the event is DROP_POLICY_DENIED, ingress, naming both pods.
func (l *netpolLab) monitorPolicyDrop(t *testing.T, node string) {
	t.Helper()
	ya, xa := l.pods[conformance.PodRef{NS: "y", Pod: "a"}], l.pods[conformance.PodRef{NS: "x", Pod: "a"}]
	ev := awaitDrop(t, node, "DROP_POLICY_DENIED", func() {
		probeConn(podNetNS(ya), corev1.ProtocolTCP, net.JoinHostPort(xa.Status.PodIP, "80"))
	})
	if ev.SrcPod != "y/a" || ev.DstPod != "x/a" || ev.PolicyDirection != "ingress" {
		t.Errorf("drop event = %+v, want DROP_POLICY_DENIED from y/a to x/a, ingress", ev)
	}
	t.Logf("myelin monitor: %+v", ev)
}

// restartKeepsEnforcing kills x/a's agent and holds it down, then lets it
// restart, probing all along: x/b keeps reaching x/a:80 and y/a never does
// (pinned maps enforce without an agent; the restarted agent changes
// nothing until it knows the cluster, and then writes nothing: its
// identities survived on disk).
func (l *netpolLab) restartKeepsEnforcing(t *testing.T, node string) {
	t.Helper()
	xa, xb, ya := l.pods[conformance.PodRef{NS: "x", Pod: "a"}], l.pods[conformance.PodRef{NS: "x", Pod: "b"}], l.pods[conformance.PodRef{NS: "y", Pod: "a"}]
	target := net.JoinHostPort(xa.Status.PodIP, "80")
	var (
		mu         sync.Mutex
		violations []string
		probes     int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			okB, okY := probeConn(podNetNS(xb), corev1.ProtocolTCP, target), probeConn(podNetNS(ya), corev1.ProtocolTCP, target)
			mu.Lock()
			probes++
			if !okB || okY {
				violations = append(violations, fmt.Sprintf("%s: x/b allowed=%v y/a allowed=%v", time.Now().Format(time.TimeOnly), okB, okY))
			}
			mu.Unlock()
		}
	}()
	killAgent(t, node, true)
	time.Sleep(3 * time.Second) // probing with no agent at all
	releaseAgent(t, node)
	var st api.PolicyStatus
	eventually(t, time.Minute, "the restarted agent's first policy apply", func(ctx context.Context) (bool, string) {
		var err error
		st, err = api.NewClient(api.NodeSocket(node)).Policy(ctx)
		return err == nil && st.Synced, fmt.Sprintf("%+v %v", st, err)
	})
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	if len(violations) > 0 {
		t.Errorf("%d of %d probe rounds around the agent restart broke the policy: %s", len(violations), probes, strings.Join(violations, "; "))
	}
	if st.Writes != 0 {
		t.Errorf("the restarted agent wrote %d map entries, want 0 (same identities, same state)", st.Writes)
	}
	t.Logf("agent restart on %s: %d probe rounds, policy held; first apply %d writes in %s", node, probes, st.Writes, st.Took)
}
