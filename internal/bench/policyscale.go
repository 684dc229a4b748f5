package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/parallel"
)

// The NetworkPolicy scale case (issue 16: 1,000 policies over 200 pods on
// one node): the shape of internal/policy's BenchmarkCompute1000Policies200Pods,
// with every pod on the measured node.
const (
	scalePods       = 200
	scalePolicies   = 1000
	scaleNamespaces = 20
	scaleApps       = 50
	scaleWriters    = 8 // parallel API writers, as labdriver's bulk Service writes
	scaleLimit      = 10 * time.Minute
)

// PolicyScale measures the agent computing and applying 1,000 NetworkPolicies over
// 200 local pods: the pods (lab runtime, `sleep infinity`) are created once; each run
// creates the policies through the API as fast as the apiserver takes them, waits
// until the agent has applied them all, creates one more policy to time a single
// change, and deletes them all again.
type PolicyScale struct {
	Env  *ControlPlane
	pods bool // the pods exist
}

// NewPolicyScale returns the policy scale workload of env.
func NewPolicyScale(env *ControlPlane) *PolicyScale { return &PolicyScale{Env: env} }

func (*PolicyScale) Name() string { return "policy-apply" }
func (*PolicyScale) Describe() string {
	return fmt.Sprintf("myelin-agent computing and applying %d NetworkPolicies over %d pods of its node (%d namespaces): agent CPU, time to apply, one more policy's apply latency",
		scalePolicies, scalePods, scaleNamespaces)
}
func (*PolicyScale) Metrics() []Metric {
	return []Metric{
		{Name: "cpu_s", Unit: "s", Description: "agent CPU seconds from the first policy created until all are applied (informer events and every recomputation included)"},
		{Name: "apply_s", Unit: "s", Description: "first policy created until the agent has written the state with all of them"},
		{Name: "run_ms", Unit: "ms", Description: "the agent's own time for one full compute and apply of the final state (its last run)"},
		{Name: "one_ms", Unit: "ms", Description: "one more policy created (API call started) until the agent has written it to the datapath"},
	}
}

// Run implements Workload.
func (w *PolicyScale) Run(ctx context.Context, t Trial) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, scaleLimit)
	defer cancel()
	node := labplan.NodeName(controlPlaneNode)
	if err := w.ensurePods(ctx, node); err != nil {
		return nil, err
	}
	base, err := waitPolicyStatus(ctx, node, time.Time{}, func(s api.PolicyStatus) bool { return true })
	if err != nil {
		return nil, err
	}
	pid, err := agentPID(node)
	if err != nil {
		return nil, err
	}
	endWatch := startWatchAgent(pid)
	start := time.Now()
	err = parallel.ForEach(ctx, scalePolicies, scaleWriters, func(ctx context.Context, i int) error { return w.create(ctx, scalePolicy(i)) })
	var all api.PolicyStatus
	if err == nil {
		all, err = waitPolicyStatus(ctx, node, start, func(s api.PolicyStatus) bool { return s.Policies == base.Policies+scalePolicies })
	}
	cpu, _, werr := endWatch()
	if err != nil || werr != nil {
		return nil, fmt.Errorf("apply %d policies: %w", scalePolicies, firstErr(err, werr))
	}
	one, err := w.timeOne(ctx, node, all.Policies)
	if err != nil {
		return nil, err
	}
	took, _ := time.ParseDuration(all.Took)
	if err := w.deleteAll(ctx, node, base.Policies); err != nil {
		return nil, err
	}
	// The pods go too: the other control-plane cases of the lab count on its room.
	if err := w.deletePods(ctx); err != nil {
		return nil, err
	}
	return Sample{"cpu_s": cpu, "apply_s": all.Applied.Sub(start).Seconds(),
		"run_ms": float64(took.Microseconds()) / 1000, "one_ms": one}, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// timeOne creates one more policy (selecting app0's pods, allowing a new port) and
// returns the milliseconds from the API call until the agent applied a computation
// that holds it (its own timestamp of the write).
func (w *PolicyScale) timeOne(ctx context.Context, node string, have int) (float64, error) {
	np := scalePolicy(0)
	np.Name = "np-one"
	np.Spec.Ingress[0].Ports[2].Port = ptrTo(intstr.FromInt32(9999))
	start := time.Now()
	if err := w.create(ctx, np); err != nil {
		return 0, err
	}
	s, err := waitPolicyStatus(ctx, node, start, func(s api.PolicyStatus) bool { return s.Policies == have+1 })
	if err != nil {
		return 0, fmt.Errorf("apply one more policy: %w", err)
	}
	return float64(s.Applied.Sub(start).Microseconds()) / 1000, nil
}

func ptrTo[T any](v T) *T { return &v }

func (w *PolicyScale) create(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	_, err := w.Env.cs.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// deleteAll deletes the policies of every scale namespace and waits until the agent
// has applied the state without them.
func (w *PolicyScale) deleteAll(ctx context.Context, node string, base int) error {
	start := time.Now()
	for n := 0; n < scaleNamespaces; n++ {
		err := w.Env.cs.NetworkingV1().NetworkPolicies(scaleNamespace(n)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("delete the policies of %s: %w", scaleNamespace(n), err)
		}
	}
	_, err := waitPolicyStatus(ctx, node, start, func(s api.PolicyStatus) bool { return s.Policies == base })
	return err
}

// deletePods deletes the 200 pods and waits until they are gone.
func (w *PolicyScale) deletePods(ctx context.Context) error {
	w.pods = false
	zero := int64(0)
	for n := 0; n < scaleNamespaces; n++ {
		err := w.Env.cs.CoreV1().Pods(scaleNamespace(n)).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{LabelSelector: scaleSelector})
		if err != nil {
			return fmt.Errorf("delete the pods of %s: %w", scaleNamespace(n), err)
		}
	}
	return waitScalePods(ctx, w.Env, 0)
}

func scaleNamespace(n int) string { return fmt.Sprintf("bench-np-%d", n) }

// ensurePods creates the namespaces (labelled team t0..t4) and the 200 pods (app0..
// app49) once, and waits until they run and the agent knows them all.
func (w *PolicyScale) ensurePods(ctx context.Context, node string) error {
	if w.pods {
		return nil
	}
	cs := w.Env.cs
	for n := 0; n < scaleNamespaces; n++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace(n), Labels: map[string]string{"team": fmt.Sprintf("t%d", n%5)}}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
	}
	err := parallel.ForEach(ctx, scalePods, scaleWriters, func(ctx context.Context, i int) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: scaleNamespace(i % scaleNamespaces),
			Labels: map[string]string{"app": fmt.Sprintf("app%d", i%scaleApps), "myelin-bench": "policy-scale"}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "host", Command: []string{"sleep", "infinity"}}}}}
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create %d pods: %w", scalePods, err)
	}
	if err := waitScalePods(ctx, w.Env, scalePods); err != nil {
		return err
	}
	w.pods = true
	return nil
}

// scaleSelector selects the scale case's pods.
const scaleSelector = "myelin-bench=policy-scale"

// waitScalePods waits until want of the scale pods exist, all running with an address.
func waitScalePods(ctx context.Context, env *ControlPlane, want int) error {
	for {
		list, err := env.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: scaleSelector})
		running, total := 0, -1
		if err == nil {
			total = len(list.Items)
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
					running++
				}
			}
		}
		if running == want && total == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d policy-scale pods (%d of %d running): %w", want, running, total, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// scalePolicy is the i-th policy: it selects one app's pods in its namespace and
// allows in two other apps (one of them only from namespaces of a team) and a CIDR
// with an except, on three TCP ports.
func scalePolicy(i int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	var ports []networkingv1.NetworkPolicyPort
	for _, p := range []int32{80, 443, int32(8000 + i%100)} {
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptrTo(intstr.FromInt32(p))})
	}
	app := func(k int) map[string]string { return map[string]string{"app": fmt.Sprintf("app%d", k%scaleApps)} }
	from := []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: app(i + 1)}},
		{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i%5)}},
			PodSelector: &metav1.LabelSelector{MatchLabels: app(i + 2)}},
		{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("172.%d.0.0/16", 16+i%16), Except: []string{fmt.Sprintf("172.%d.1.0/24", 16+i%16)}}},
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace(i % scaleNamespaces), Name: fmt.Sprintf("np%d", i)},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: app(i)},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ports, From: from}}},
	}
}

// waitPolicyStatus polls the node agent's policy status (every 20 ms: the figures
// use the agent's own timestamps, not the poll) until a computation started after
// since, applied without error, satisfies ok.
func waitPolicyStatus(ctx context.Context, node string, since time.Time, ok func(api.PolicyStatus) bool) (api.PolicyStatus, error) {
	last := "no answer"
	for {
		s, err := api.NewClient(api.NodeSocket(node)).Policy(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case s.Error != "":
			last = s.Error
		case s.Synced && !s.Started.Before(since) && ok(s):
			return s, nil
		default:
			last = fmt.Sprintf("%d policies applied at %s", s.Policies, s.Applied.Format(time.RFC3339Nano))
		}
		select {
		case <-ctx.Done():
			return api.PolicyStatus{}, fmt.Errorf("waiting for the agent of %s to apply the policies: %w (last: %s)", node, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
