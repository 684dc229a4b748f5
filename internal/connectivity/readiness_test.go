package connectivity

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestReadinessWaitsForReadyPods: a test pod that is Running with an IP but not Ready
// (its server crash-loops) is not ready, and the state says why; once Ready it is.
func TestReadinessWaitsForReadyPods(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podClient, Namespace: "t"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.5",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "probe", RestartCount: 3,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}}}},
		},
	}
	cs := fakeCluster(p)
	e := &env{ns: "t", pods: map[string]pod{}, services: map[string]*corev1.Service{}}
	o := Options{Client: cs}
	if got := e.readiness(context.Background(), o, 1); !strings.Contains(got, "CrashLoopBackOff") || !strings.Contains(got, "restarts 3") {
		t.Fatalf("crash-looping pod: readiness %q, want it not ready with the reason", got)
	}
	p.Status.Conditions[0].Status = corev1.ConditionTrue
	p.Status.ContainerStatuses = nil
	if _, err := cs.CoreV1().Pods("t").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.readiness(context.Background(), o, 1); got != "" {
		t.Fatalf("ready pod: readiness %q, want ready", got)
	}
}

// TestCheckDaemonSetWantsTheChartsAgents: only kube-system/myelin with a ready agent
// counts; a tenant's DaemonSet named myelin with the chart's labels in its own namespace,
// however ready, does not make the check pass.
func TestCheckDaemonSetWantsTheChartsAgents(t *testing.T) {
	ds := func(ns string, ready int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "myelin", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "myelin"}},
			Status:     appsv1.DaemonSetStatus{NumberReady: ready},
		}
	}
	for _, c := range []struct {
		name string
		objs []runtime.Object
		want string // "" for a pass
	}{
		{"none", nil, "no myelin agents found"},
		{"tenant's", []runtime.Object{ds("tenant", 3)}, "no myelin agents found"},
		{"none ready", []runtime.Object{ds("tenant", 3), ds("kube-system", 0)}, "no agent is ready"},
		{"ready", []runtime.Object{ds("kube-system", 1)}, ""},
	} {
		err := checkDaemonSet(context.Background(), Options{Client: fakeCluster(c.objs...)})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want a pass", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
