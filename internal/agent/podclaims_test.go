package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// claimPod is a pod of node with ip in its status and phase, being deleted.
func claimPod(name, uid, node, ip string, phase corev1.PodPhase) *corev1.Pod {
	deleted := metav1.Now()
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), DeletionTimestamp: &deleted,
		Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
}

// An address is claimed by a pod of this node whose status lists it and that has not
// finished, for every pod but itself; not by a finished pod (no node takes its
// address for it), nor by another node's pod.
func TestPodClaims(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, localPodIPIndexers("n1"))
	for _, p := range []*corev1.Pod{
		claimPod("old", "u-old", "n1", "10.244.0.2", corev1.PodRunning),
		claimPod("done", "u-done", "n1", "10.244.0.3", corev1.PodSucceeded),
		claimPod("away", "u-away", "n2", "10.244.0.4", corev1.PodRunning),
	} {
		c, _ := slimPod(p)
		if err := idx.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	var claims podClaims
	if claims.claimed(netip.MustParseAddr("10.244.0.2"), "u-new") {
		t.Error("an address is claimed before the pod cache is used")
	}
	claims.use(idx)
	for _, c := range []struct {
		ip, uid string
		want    bool
	}{
		{"10.244.0.2", "u-new", true},
		{"10.244.0.2", "", true},
		{"10.244.0.2", "u-old", false}, // the pod's own address: a new sandbox of it
		{"10.244.0.3", "u-new", false},
		{"10.244.0.4", "u-new", false},
		{"10.244.0.5", "u-new", false},
	} {
		if got := claims.claimed(netip.MustParseAddr(c.ip), c.uid); got != c.want {
			t.Errorf("claimed(%s) for pod %q = %v, want %v", c.ip, c.uid, got, c.want)
		}
	}
	c, _ := slimPod(claimPod("old", "u-old", "n1", "10.244.0.2", corev1.PodFailed)) // the kubelet reports it finished
	if err := idx.Update(c); err != nil {
		t.Fatal(err)
	}
	if claims.claimed(netip.MustParseAddr("10.244.0.2"), "u-new") {
		t.Error("10.244.0.2 is still claimed once its pod finished")
	}
}

// The agent's IPAM, wired to the policy loop's Pod cache, does not give a new pod the
// address a pod being deleted still lists (ADD fails, saying why, while it is the only
// one), gives it to that pod's own new sandbox, and to the new pod once the old one
// finished.
func TestAllocatePassesOverAddressesOfPodsBeingDeleted(t *testing.T) {
	cs := fake.NewSimpleClientset(claimPod("old", "u-old", "n1", "10.244.0.2", corev1.PodRunning))
	pol, ctx := startPolicyLoop(t, cs, &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()})
	eps, _, _ := testEndpointsOf(t, t.TempDir(), "10.244.0.0/30") // 10.244.0.2 only
	eps.UseAddressClaims(pol.claims.claimed)
	waitFor(t, "the policy loop's caches", func() bool { return pol.caches.Load() != nil })

	newPod := api.PodRef{ContainerID: "new", Namespace: "shop", Pod: "new", PodUID: "u-new"}
	_, err := eps.Allocate(newPod)
	if !errors.Is(err, ipam.ErrClaimed) || !strings.Contains(err.Error(), "shop/new") || !strings.Contains(err.Error(), "10.244.0.0/30") {
		t.Fatalf("allocation for shop/new while shop/old being deleted lists 10.244.0.2: %v, want ErrClaimed naming the pod and the range", err)
	}
	again, err := eps.Allocate(api.PodRef{ContainerID: "old-again", Namespace: "shop", Pod: "old", PodUID: "u-old"})
	if err != nil || again.IP != "10.244.0.2" {
		t.Fatalf("allocation for shop/old's own new sandbox = %+v %v, want 10.244.0.2", again, err)
	}
	if err := eps.Release("old-again", again.Attempt); err != nil {
		t.Fatal(err)
	}

	finished := claimPod("old", "u-old", "n1", "10.244.0.2", corev1.PodFailed)
	if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, finished, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "shop/old finished in the cache", func() bool {
		return !pol.claims.claimed(netip.MustParseAddr("10.244.0.2"), "u-new")
	})
	if alloc, err := eps.Allocate(newPod); err != nil || alloc.IP != "10.244.0.2" {
		t.Errorf("allocation for shop/new once shop/old finished = %+v %v, want 10.244.0.2", alloc, err)
	}
}

// waitFor waits until cond holds, failing the test (naming what) if it does not
// within a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Once a Pod of this node stops claiming its address (deleted, finished, or given
// another), the address stays claimed for claimCooldown: the other nodes still take
// it for that Pod until their computation without it is applied. A Pod of another
// node, or one that claimed nothing, starts no cooldown.
func TestPodClaimsCooldown(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, localPodIPIndexers("n1"))
	now := time.Unix(1000, 0)
	claims := podClaims{now: func() time.Time { return now }}
	claims.use(idx)
	h := claims.handler("n1")
	slim := func(p *corev1.Pod) *policyCachedPod { c, _ := slimPod(p); return c.(*policyCachedPod) }
	deleted := slim(claimPod("deleted", "u-1", "n1", "10.244.0.2", corev1.PodRunning))
	running := slim(claimPod("finishing", "u-2", "n1", "10.244.0.3", corev1.PodRunning))
	moved := slim(claimPod("moved", "u-3", "n1", "10.244.0.4", corev1.PodRunning))
	h.DeleteFunc(cache.DeletedFinalStateUnknown{Key: "default/deleted", Obj: deleted})
	h.UpdateFunc(running, slim(claimPod("finishing", "u-2", "n1", "10.244.0.3", corev1.PodSucceeded)))
	h.UpdateFunc(moved, slim(claimPod("moved", "u-3", "n1", "10.244.0.9", corev1.PodRunning)))
	h.DeleteFunc(slim(claimPod("away", "u-4", "n2", "10.244.0.5", corev1.PodRunning)))
	steady := slim(claimPod("steady", "u-5", "n1", "10.244.0.6", corev1.PodRunning))
	h.UpdateFunc(steady, steady) // a status change that keeps the address
	for _, c := range []struct {
		ip   string
		want bool
	}{
		{"10.244.0.2", true}, {"10.244.0.3", true}, {"10.244.0.4", true}, {"10.244.0.5", false}, {"10.244.0.6", false},
	} {
		if got := claims.claimed(netip.MustParseAddr(c.ip), "u-new"); got != c.want {
			t.Errorf("right after: claimed(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
	now = now.Add(claimCooldown)
	for _, ip := range []string{"10.244.0.2", "10.244.0.3", "10.244.0.4"} {
		if claims.claimed(netip.MustParseAddr(ip), "u-new") {
			t.Errorf("after the cooldown: %s still claimed", ip)
		}
	}
}

// The cooldowns are kept in the state directory: an agent restarted within one keeps
// the address claimed for the rest of it (the Pod is gone from the apiserver's list by
// then), one restarted after it does not, and a start time the clock has not reached
// yet counts from now. An unreadable file cools nothing and stops nothing.
func TestPodClaimsCooldownSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), cooldownFile)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	first := &podClaims{path: path, log: log, now: clock}
	first.released(netip.MustParseAddr("10.244.0.2"))
	now = now.Add(claimCooldown / 2)
	first.released(netip.MustParseAddr("10.244.0.3"))

	restarted := func() *podClaims {
		c := &podClaims{path: path, log: log, now: clock}
		c.loadCooldowns()
		c.use(cache.NewIndexer(cache.MetaNamespaceKeyFunc, localPodIPIndexers("n1")))
		return c
	}
	now = now.Add(claimCooldown/2 - time.Second)
	c := restarted()
	for ip, want := range map[string]bool{"10.244.0.2": true, "10.244.0.3": true, "10.244.0.4": false} {
		if got := c.claimed(netip.MustParseAddr(ip), "u-new"); got != want {
			t.Errorf("restarted 1 s before the first cooldown ends: claimed(%s) = %v, want %v", ip, got, want)
		}
	}
	now = now.Add(2 * time.Second)
	c = restarted()
	for ip, want := range map[string]bool{"10.244.0.2": false, "10.244.0.3": true} {
		if got := c.claimed(netip.MustParseAddr(ip), "u-new"); got != want {
			t.Errorf("restarted after the first cooldown: claimed(%s) = %v, want %v", ip, got, want)
		}
	}
	now = time.Unix(10, 0) // the clock was set back past both
	c = restarted()
	now = now.Add(claimCooldown - time.Second)
	if !c.claimed(netip.MustParseAddr("10.244.0.3"), "u-new") {
		t.Error("after the clock was set back: 10.244.0.3 no longer cooling within a cooldown of the start")
	}
	now = now.Add(2 * time.Second)
	if c.claimed(netip.MustParseAddr("10.244.0.3"), "u-new") {
		t.Error("after the clock was set back: 10.244.0.3 still cooling a cooldown after the start")
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c = restarted(); c.claimed(netip.MustParseAddr("10.244.0.3"), "u-new") {
		t.Error("an unreadable file cools 10.244.0.3")
	}
}

// The agent's policy loop reads the cooldowns its state directory keeps when it is
// made (newPolicyLoop), before its Pod cache is used for IPAM.
func TestPolicyLoopLoadsCooldowns(t *testing.T) {
	dir := t.TempDir()
	released := fmt.Sprintf(`{"10.244.0.2":%d}`, time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(dir, cooldownFile), []byte(released), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := newPolicyLoop("n1", dir, newFakePolicyMaps(), kubefake.Wrap(fake.NewSimpleClientset()),
		func() []api.Endpoint { return nil }, newLoops(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !p.claims.cooling(netip.MustParseAddr("10.244.0.2")) {
		t.Error("the policy loop's claims do not cool 10.244.0.2, released a moment ago by the previous agent")
	}
}
