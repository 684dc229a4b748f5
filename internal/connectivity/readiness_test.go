package connectivity

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
