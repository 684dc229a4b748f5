package agent

import (
	"context"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// An agent stopped before its Node informer synced (a SIGTERM while the apiserver
// is slow) must not run the route, tunnel and no-masquerade loops with the empty
// cache: they would delete every other node's entries on the way out.
func TestFollowWaitsForTheNodes(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	log := slog.New(slog.DiscardHandler)

	unsynced := newNodeWatch(kubefake.Wrap(cs)) // its informer never runs
	stopped, stop := context.WithCancel(context.Background())
	stop()
	unsynced.follow(stopped, unsynced.subscribe(), "node-routes", newLoops(), log, func(nodes []*corev1.Node) error {
		t.Errorf("sync ran with %d Nodes although the informer never synced", len(nodes))
		return nil
	})

	synced := newNodeWatch(kubefake.Wrap(cs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go synced.Run(ctx)
	var got []*corev1.Node
	synced.follow(ctx, synced.subscribe(), "node-routes", newLoops(), log, func(nodes []*corev1.Node) error {
		got = nodes
		cancel()
		return nil
	})
	if len(got) != 1 || got[0].Name != "n2" {
		t.Errorf("sync after the informer synced got %v, want n2", got)
	}
}
