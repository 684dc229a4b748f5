package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
