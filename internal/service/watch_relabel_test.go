package service

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// An EndpointSlice relabelled to another Service (kubernetes.io/service-name) leaves
// the first at once: its update queues both Services, not only the new one (the
// first kept the slice's backends until the 5-minute resync).
func TestWatcherSliceRelabelLeavesOldService(t *testing.T) {
	web2 := svcWith(func(s *corev1.Service) {
		s.Name, s.Spec.ClusterIP, s.Spec.ClusterIPs = "web2", "10.96.0.11", []string{"10.96.0.11"}
	})
	sl := slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"})
	cs := fake.NewSimpleClientset(svcWith(nil), web2, sl)
	m, err := NewManager(newFake(), 0)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(kubefake.Wrap(cs), m, nodeOpts, func(error) {}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// backends returns how many active backends each Service's frontends have.
	backends := func() map[string]int {
		applied, _ := m.Snapshot()
		out := map[string]int{}
		for _, a := range applied {
			out[a.Service] += len(a.Active)
		}
		return out
	}
	waitFor := func(what string, ok func(map[string]int) bool) {
		t.Helper()
		guard := time.After(30 * time.Second) // against a hang, not a measure
		for {
			got := backends()
			if ok(got) {
				return
			}
			select {
			case <-guard:
				t.Fatalf("%s: backends by Service %v", what, got)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitFor("the slice's Service serves it", func(b map[string]int) bool { return b["default/web"] == 1 && b["default/web2"] == 0 })
	moved := sl.DeepCopy()
	moved.Labels = map[string]string{discoveryv1.LabelServiceName: "web2"}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(context.Background(), moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("relabelled to web2", func(b map[string]int) bool { return b["default/web"] == 0 && b["default/web2"] == 1 })
}
