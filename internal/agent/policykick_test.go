package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPolicyPause(t *testing.T) {
	for _, c := range []struct{ last, want time.Duration }{
		{0, policyDebounce},
		{10 * time.Millisecond, policyDebounce},
		{40 * time.Millisecond, policyDebounce},
		{100 * time.Millisecond, 300 * time.Millisecond},
		{time.Second, policyPauseMax},
	} {
		if got := policyPause(c.last); got != c.want {
			t.Errorf("policyPause(%v) = %v, want %v", c.last, got, c.want)
		}
	}
}

// Only pod events that change what policy reads poke the loop (the events carry
// the cache's objects, as the informer's transform made them).
func TestPodPolicyHandler(t *testing.T) {
	pod := func(ip string, phase corev1.PodPhase, app string, ready corev1.ConditionStatus) any {
		obj, _ := slimPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: "n2"},
			Status: corev1.PodStatus{Phase: phase, PodIP: ip,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}})
		return obj
	}
	running := pod("10.244.1.5", corev1.PodRunning, "web", corev1.ConditionTrue)
	for _, c := range []struct {
		name     string
		event    func(h cache.ResourceEventHandlerFuncs)
		wantPoke bool
	}{
		{"add without an address", func(h cache.ResourceEventHandlerFuncs) { h.OnAdd(pod("", corev1.PodPending, "web", "False"), false) }, false},
		{"add with an address", func(h cache.ResourceEventHandlerFuncs) { h.OnAdd(running, false) }, true},
		{"gets its address", func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod("", corev1.PodPending, "web", "False"), running)
		}, true},
		{"readiness flaps", func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod("10.244.1.5", corev1.PodRunning, "web", corev1.ConditionFalse))
		}, false},
		{"relabelled", func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod("10.244.1.5", corev1.PodRunning, "api", corev1.ConditionTrue))
		}, true},
		{"finishes", func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod("10.244.1.5", corev1.PodSucceeded, "web", corev1.ConditionFalse))
		}, true},
		{"deleted with an address", func(h cache.ResourceEventHandlerFuncs) { h.OnDelete(running) }, true},
		{"deleted before it had one", func(h cache.ResourceEventHandlerFuncs) { h.OnDelete(pod("", corev1.PodPending, "web", "False")) }, false},
		{"tombstone", func(h cache.ResourceEventHandlerFuncs) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: running})
		}, true},
	} {
		poked := false
		c.event(podPolicyHandler(func() { poked = true }))
		if poked != c.wantPoke {
			t.Errorf("%s: poked %v, want %v", c.name, poked, c.wantPoke)
		}
	}
}
