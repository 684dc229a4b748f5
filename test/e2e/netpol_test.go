package e2e

import (
	"context"
	"errors"
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
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/policy/conformance"
)

// The upstream NetworkPolicy truth tables (internal/policy/conformance) on a
// 2-node lab, one test per host-routing mode (and tunnel mode): namespaces
// x, y, z with pods a, b, c each serving TCP and UDP on ports 80 and 81,
// spread over both nodes; every probe connects from inside a pod's netns.
// The summary line "NetworkPolicy conformance <profile>: N/M passed" is what
// docs/policy.md reports.
func TestLabMyelinNetworkPolicyBPF(t *testing.T)    { netpolConformance(t, "native") }
func TestLabMyelinNetworkPolicyLegacy(t *testing.T) { netpolConformance(t, "native-legacy") }
func TestLabMyelinNetworkPolicyTunnel(t *testing.T) { netpolConformance(t, "tunnel") }

// netpolProbeTimeout is how long a denied probe waits; probes run in parallel.
const netpolProbeTimeout = 1500 * time.Millisecond

// netpolLab is the model deployed in a lab.
type netpolLab struct {
	cs      kubernetes.Interface
	pods    map[conformance.PodRef]corev1.Pod
	nodes   []string
	profile string // the lab's (myelin lab up --profile)
}

func netpolConformance(t *testing.T, profile string) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", profile)
	l := deployNetpolModel(t, cs)
	l.profile = profile
	passed, ran := 0, 0
	var skipped []string
	for _, c := range conformance.Cases() {
		if c.Skip != "" {
			skipped = append(skipped, c.Name)
			continue
		}
		ran++
		if err := l.runCase(c); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		} else {
			passed++
		}
		l.reset(t)
	}
	t.Logf("NetworkPolicy conformance %s: %d/%d passed (%d of upstream's %d not run: %s)", profile, passed, ran,
		len(skipped), len(conformance.Cases()), strings.Join(skipped, "; "))
	l.isolatedFromStart(t)
	l.operatorView(t)
	l.pushAcrossPolicyEdits(t)
	l.openBeforeIsolation(t)
	labDown(t)
}

// deployNetpolModel creates namespaces x, y, z and their pods a, b, c,
// alternating between the nodes, and waits until every pod answers.
func deployNetpolModel(t *testing.T, cs kubernetes.Interface) *netpolLab {
	t.Helper()
	ctx := context.Background()
	l := &netpolLab{cs: cs, pods: map[conformance.PodRef]corev1.Pod{}, nodes: []string{labplan.NodeName(1), labplan.NodeName(2)}}
	for _, ns := range conformance.Namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range conformance.AllPods() {
		spec := hostPod("server", "sh", "-c", fmt.Sprintf("%s lab serve --listen :80 & exec %s lab serve --listen :81", myelinBin, myelinBin))
		spec.NodeName = l.nodes[i%2]
		for _, port := range conformance.Ports {
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
				spec.Containers[0].Ports = append(spec.Containers[0].Ports, corev1.ContainerPort{
					Name: conformance.PortName(port, proto), ContainerPort: port, Protocol: proto})
			}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: r.Pod, Namespace: r.NS, Labels: map[string]string{"pod": r.Pod}}, Spec: spec}
		if _, err := cs.CoreV1().Pods(r.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, podTimeout, "the 9 model pods running", func(ctx context.Context) (bool, string) {
		var states []string
		for _, r := range conformance.AllPods() {
			p, err := cs.CoreV1().Pods(r.NS).Get(ctx, r.Pod, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				states = append(states, r.String()+" not running")
				continue
			}
			l.pods[r] = *p
		}
		return len(states) == 0, strings.Join(states, ", ")
	})
	all := conformance.Probe{Port: 80, Proto: corev1.ProtocolTCP}
	eventually(t, time.Minute, "every pod reaching every pod before any policy", func(context.Context) (bool, string) {
		bad := l.mismatches(all)
		return len(bad) == 0, strings.Join(bad, ", ")
	})
	return l
}

// runCase runs one case's steps; a probe that does not match its truth
// table is retried (policy changes take a moment to reach every agent).
func (l *netpolLab) runCase(c conformance.Case) error {
	for i, s := range c.Steps {
		since := time.Now()
		for _, a := range s.Do {
			if err := l.do(a); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
		}
		applied := l.waitApplied(since) // the probes judge; this only explains them
		for _, p := range s.Probes {
			var bad []string
			for attempt := 0; attempt < 5; attempt++ {
				if bad = l.mismatches(p); len(bad) == 0 {
					break
				}
				time.Sleep(time.Second)
			}
			if len(bad) > 0 {
				return fmt.Errorf("step %d, %d/%s: %d of 72 connections differ from the truth table: %s (applied: %v)",
					i, p.Port, p.Proto, len(bad), strings.Join(bad, ", "), applied)
			}
		}
	}
	return nil
}

func (l *netpolLab) ips() conformance.IPs {
	out := conformance.IPs{}
	for r, p := range l.pods {
		out[r] = mustParseAddr(p.Status.PodIP)
	}
	return out
}

func (l *netpolLab) do(a conformance.Action) error {
	ctx := context.Background()
	switch {
	case a.Create != nil:
		np := a.Create(l.ips())
		_, err := l.cs.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
		return err
	case a.Update != nil:
		np := a.Update(l.ips())
		cur, err := l.cs.NetworkingV1().NetworkPolicies(np.Namespace).Get(ctx, np.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec = np.Spec
		_, err = l.cs.NetworkingV1().NetworkPolicies(np.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	case a.DeleteAll:
		_, err := l.deletePolicies()
		return err
	case a.LabelNamespace != "":
		ns, err := l.cs.CoreV1().Namespaces().Get(ctx, a.LabelNamespace, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k, v := range a.Labels {
			ns.Labels[k] = v
		}
		_, err = l.cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
		return err
	case a.LabelPod != nil:
		return l.addPodLabels(*a.LabelPod, a.Labels)
	}
	return errors.New("empty action")
}

// addPodLabels adds labels to a pod (upstream's AddPodLabels).
func (l *netpolLab) addPodLabels(r conformance.PodRef, labels map[string]string) error {
	_, err := l.labelPod(r, labels, false)
	return err
}

// labelPod adds labels to the pod, or with reset makes them its only labels, and
// says whether it changed the pod.
func (l *netpolLab) labelPod(r conformance.PodRef, labels map[string]string, reset bool) (bool, error) {
	ctx := context.Background()
	p, err := l.cs.CoreV1().Pods(r.NS).Get(ctx, r.Pod, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if reset {
		if maps.Equal(p.Labels, labels) {
			return false, nil
		}
		p.Labels = map[string]string{}
	}
	for k, v := range labels {
		p.Labels[k] = v
	}
	_, err = l.cs.CoreV1().Pods(r.NS).Update(ctx, p, metav1.UpdateOptions{})
	return err == nil, err
}

// deletePolicies deletes every policy of the model's namespaces and says how many
// there were.
func (l *netpolLab) deletePolicies() (int, error) {
	n := 0
	for _, ns := range conformance.Namespaces {
		list, err := l.cs.NetworkingV1().NetworkPolicies(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return n, err
		}
		n += len(list.Items)
		err = l.cs.NetworkingV1().NetworkPolicies(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// reset removes every policy and label change a case made and, when there was any,
// waits until the agents applied its removal (a case that failed before changing
// anything leaves nothing for them to apply).
func (l *netpolLab) reset(t *testing.T) {
	t.Helper()
	since := time.Now()
	deleted, err := l.deletePolicies()
	if err != nil {
		t.Fatal(err)
	}
	changed := deleted > 0
	for _, r := range conformance.AllPods() {
		relabelled, err := l.labelPod(r, map[string]string{"pod": r.Pod}, true)
		if err != nil {
			t.Fatal(err)
		}
		changed = changed || relabelled
	}
	for _, name := range conformance.Namespaces {
		ns, err := l.cs.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ns.Labels["ns2"]; ok {
			changed = true
			delete(ns.Labels, "ns2")
			if _, err := l.cs.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !changed {
		return
	}
	if err := l.waitApplied(since); err != nil {
		t.Fatal(err)
	}
}

// waitApplied waits (up to 30 s) until every agent applied a computation
// that started after since (after the changes made since then) and that
// counted as many NetworkPolicies as the API holds now: a computation that
// a change made before since triggered can start after since and still miss
// a policy its informer had not yet seen. The error says which agent lags;
// callers whose probes retry anyway may ignore it.
func (l *netpolLab) waitApplied(since time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nps, err := l.cs.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range l.nodes {
		var last string
		for {
			st, err := api.NewClient(api.NodeSocket(n)).Policy(ctx)
			if err == nil && st.Synced && st.Started.After(since) && st.Policies == len(nps.Items) {
				break
			}
			last = fmt.Sprintf("synced=%v started=%s policies=%d (the API holds %d) err=%v",
				st.Synced, st.Started.Format(time.StampMilli), st.Policies, len(nps.Items), err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("agent on %s has not applied the changes made since %s: %s", n, since.Format(time.StampMilli), last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// mismatches probes all 72 pairs in parallel and lists those that differ from p.
func (l *netpolLab) mismatches(p conformance.Probe) []string {
	var (
		mu  sync.Mutex
		bad []string
		wg  sync.WaitGroup
	)
	for _, f := range conformance.AllPods() {
		for _, d := range conformance.AllPods() {
			if f == d {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := probeConn(podNetNS(l.pods[f]), p.Proto, net.JoinHostPort(l.pods[d].Status.PodIP, fmt.Sprint(p.Port)))
				if want := p.Expected(f, d); got != want {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s->%s got %v want %v", f, d, got, want))
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return bad
}

// probeConn connects from inside netns path: TCP connects, UDP gets an answer.
func probeConn(path string, proto corev1.Protocol, addr string) bool {
	err := netns.Do(path, func() error {
		network := "tcp"
		if proto == corev1.ProtocolUDP {
			network = "udp"
		}
		c, err := net.DialTimeout(network, addr, netpolProbeTimeout)
		if err != nil {
			return err
		}
		defer c.Close()
		if network == "tcp" {
			return nil
		}
		_ = c.SetDeadline(time.Now().Add(netpolProbeTimeout))
		if _, err := c.Write([]byte("netpol probe")); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 512))
		return err
	})
	return err == nil
}

func mustParseAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

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

// pushAcrossPolicyEdits holds a connection from x/b to x/c:9100 (x/c isolated
// both ways: admitting x/b on 9100, no egress) on which only the server sends,
// as a watch or a server stream does. An edit of x/c's policy that still
// admits x/b (a port added) must not cut the push: the agent's purge keeps the
// ends the new state allows (before, x/c's next push was judged as a new
// connection out of x/c, denied, and the stream stalled until the client
// spoke). An edit that no longer admits x/b cuts it.
func (l *netpolLab) pushAcrossPolicyEdits(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	xb, xc := l.pods[conformance.PodRef{NS: "x", Pod: "b"}], l.pods[conformance.PodRef{NS: "x", Pod: "c"}]
	policyFor := func(from string, ports ...int32) *networkingv1.NetworkPolicy {
		var ps []networkingv1.NetworkPolicyPort
		for _, p := range ports {
			port, tcp := intstr.FromInt32(p), corev1.ProtocolTCP
			ps = append(ps, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
		}
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "x-c-push", Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "c"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ps, From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": from}}}}}},
			}}
	}
	// apply writes np and waits until x/c's agent traces port from x/b as
	// verdict: the agent publishes what it traces once the apply that
	// computed it (writes and purge) is done. The verdict must be one the
	// state before np does not give.
	node := xc.Spec.NodeName
	apply := func(np *networkingv1.NetworkPolicy, create bool, port, verdict string) {
		t.Helper()
		nps := l.cs.NetworkingV1().NetworkPolicies("x")
		var err error
		if create {
			_, err = nps.Create(ctx, np, metav1.CreateOptions{})
		} else if cur, getErr := nps.Get(ctx, np.Name, metav1.GetOptions{}); getErr != nil {
			err = getErr
		} else {
			cur.Spec = np.Spec
			_, err = nps.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "x/b -> x/c " + port + ": " + verdict
		eventually(t, time.Minute, "x/c's agent tracing "+want, func(context.Context) (bool, string) {
			out, err := myelin("policy", "trace", "--node", node, "--from", "x/b", "--to", "x/c", "--port", port)
			return err == nil && strings.Contains(out, want), fmt.Sprintf("%v: %s", err, out)
		})
	}
	// 9101 is allowed while no policy isolates x/c and denied once x-c-push does:
	// the connection below opens after x/c is isolated, so its check tracks it
	// (9100 traces ALLOWED before the policy is applied too: waiting for that
	// let the dial race the apply, and a connection opened before a policy
	// isolates its pod both ways is not tracked, docs/policy.md).
	apply(policyFor("b", 9100), true, "9101/TCP", "DENIED")
	defer func() { _ = l.cs.NetworkingV1().NetworkPolicies("x").Delete(ctx, "x-c-push", metav1.DeleteOptions{}) }()

	// No keepalives: a probe of x/b's would track x/c's end again through its
	// ingress, and the push would pass without the purge keeping it.
	var ln net.Listener
	if err := netns.Do(podNetNS(xc), func() (err error) {
		ln, err = (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", ":9100")
		return err
	}); err != nil {
		t.Fatalf("listen in x/c: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var client net.Conn
	if err := netns.Do(podNetNS(xb), func() (err error) {
		client, err = (&net.Dialer{Timeout: netpolProbeTimeout, KeepAlive: -1}).Dial("tcp", net.JoinHostPort(xc.Status.PodIP, "9100"))
		return err
	}); err != nil {
		t.Fatalf("x/b -> x/c:9100 (admitted): %v", err)
	}
	defer client.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(netpolProbeTimeout):
	}
	if server == nil {
		t.Fatal("x/c accepted no connection from x/b")
	}
	defer server.Close()
	push := func(what string, want bool) {
		t.Helper()
		if _, err := server.Write([]byte(what)); err != nil {
			t.Fatalf("x/c's push %q: %v", what, err)
		}
		_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		n, err := client.Read(buf)
		if got := err == nil && string(buf[:n]) == what; got != want {
			t.Errorf("x/c's push %q reached x/b: %v (read %q, %v), want %v", what, got, buf[:n], err, want)
		}
	}
	push("before", true)
	apply(policyFor("b", 9100, 9101), false, "9101/TCP", "ALLOWED")
	push("after a port was added", true)
	apply(policyFor("a", 9100, 9101), false, "9100/TCP", "DENIED")
	push("after x/b is no longer admitted", false)
}

// openBeforeIsolation: x/b, which no policy selects, downloads from a pod of
// each node (y/a on its own node, y/b on the other) on connections it opened,
// and serves a connection each of them opened; then a default-deny ingress
// policy selects x/b. The downloads go on: the agent tracked the connections
// x/b opened before it isolated x/b (docs/policy.md, "Connections open before
// isolation"; before, the peers' segments were judged as new inbound traffic,
// denied, and x/b, which only receives, sent nothing that would track them).
// The connections the peers opened into x/b stop. No keepalives: x/b's probes
// would track its connections through its open egress whatever the agent did.
func (l *netpolLab) openBeforeIsolation(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	xb := l.pods[conformance.PodRef{NS: "x", Pod: "b"}]
	listen := func(pod corev1.Pod, port string) net.Listener {
		t.Helper()
		var ln net.Listener
		if err := netns.Do(podNetNS(pod), func() (err error) {
			ln, err = (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", ":"+port)
			return err
		}); err != nil {
			t.Fatalf("listen in %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		return ln
	}
	// connect dials to:port from pod and returns both ends: the dialer's and the
	// one ln accepted.
	connect := func(from, to corev1.Pod, ln net.Listener, port string) (dialed, accepted net.Conn) {
		t.Helper()
		got := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			got <- c
		}()
		if err := netns.Do(podNetNS(from), func() (err error) {
			dialed, err = (&net.Dialer{Timeout: netpolProbeTimeout, KeepAlive: -1}).Dial("tcp", net.JoinHostPort(to.Status.PodIP, port))
			return err
		}); err != nil {
			t.Fatalf("%s/%s -> %s/%s:%s: %v", from.Namespace, from.Name, to.Namespace, to.Name, port, err)
		}
		select {
		case accepted = <-got:
		case <-time.After(netpolProbeTimeout):
		}
		if accepted == nil {
			t.Fatalf("%s/%s accepted no connection from %s/%s", to.Namespace, to.Name, from.Namespace, from.Name)
		}
		return dialed, accepted
	}
	// send writes what on w and says whether r read it within wait.
	send := func(w, r net.Conn, what string, wait time.Duration) bool {
		t.Helper()
		if _, err := w.Write([]byte(what)); err != nil {
			t.Fatalf("write %q: %v", what, err)
		}
		_ = r.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		return err == nil && string(buf[:n]) == what
	}
	type pair struct {
		peer                       string
		down, up, inbound, inbServ net.Conn // x/b's download (its end, the peer's); the peer's connection into x/b (its end, x/b's)
	}
	xbLn := listen(xb, "9201")
	defer xbLn.Close()
	var pairs []pair
	for _, name := range []string{"a", "b"} {
		peer := l.pods[conformance.PodRef{NS: "y", Pod: name}]
		ln := listen(peer, "9200")
		defer ln.Close()
		p := pair{peer: "y/" + name}
		p.down, p.up = connect(xb, peer, ln, "9200")
		p.inbound, p.inbServ = connect(peer, xb, xbLn, "9201")
		for _, c := range []net.Conn{p.down, p.up, p.inbound, p.inbServ} {
			defer c.Close()
		}
		if !send(p.up, p.down, "before", 10*time.Second) || !send(p.inbound, p.inbServ, "before", 10*time.Second) {
			t.Fatalf("%s and x/b: no traffic before any policy selects x/b", p.peer)
		}
		pairs = append(pairs, p)
	}

	nps := l.cs.NetworkingV1().NetworkPolicies("x")
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "x-b-deny-ingress", Namespace: "x"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		}}
	if _, err := nps.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nps.Delete(ctx, deny.Name, metav1.DeleteOptions{}) }()
	want := "y/b -> x/b 9201/TCP: DENIED"
	eventually(t, time.Minute, "x/b's agent tracing "+want, func(context.Context) (bool, string) {
		out, err := myelin("policy", "trace", "--node", xb.Spec.NodeName, "--from", "y/b", "--to", "x/b", "--port", "9201/TCP")
		return err == nil && strings.Contains(out, want), fmt.Sprintf("%v: %s", err, out)
	})
	for _, p := range pairs {
		if !send(p.up, p.down, "after x/b was isolated", 10*time.Second) {
			t.Errorf("%s's data on the connection x/b opened before its isolation did not reach x/b", p.peer)
		}
		if send(p.inbound, p.inbServ, "after x/b was isolated", 3*time.Second) {
			t.Errorf("%s's data on the connection it opened into x/b reached x/b after a default-deny ingress policy isolated x/b", p.peer)
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
