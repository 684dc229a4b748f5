package service

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// The cache keeps records, not objects: keyed like the objects, indexed by their
// Service, with each endpoint's conditions and node reduced to flags; records and
// tombstones pass the transform unchanged.
func TestCacheTransformRecords(t *testing.T) {
	transform := cacheTransform("node-1")
	svc := svcWith(func(s *corev1.Service) {
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"}
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	})
	es := slice(8080, "http",
		ep{ip: "10.244.1.5", node: "node-1"},
		ep{ip: "10.244.2.7", node: "node-2", ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)},
		ep{ip: "fe80::1", node: "node-1"}) // not IPv4: dropped
	es.Endpoints[0].Addresses = append(es.Endpoints[0].Addresses, "10.244.1.6")
	es.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "web-1"}

	rs, _ := transform(svc)
	rsl, _ := transform(es)
	cs, ok1 := rs.(*cachedService)
	csl, ok2 := rsl.(*cachedSlice)
	if !ok1 || !ok2 {
		t.Fatalf("transform gave %T and %T, want the cache records", rs, rsl)
	}
	for obj, want := range map[any]string{cs: "default/web", csl: "default/web-abc"} {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err != nil || key != want {
			t.Errorf("key of %T = %q, %v; want %q", obj, key, err, want)
		}
	}
	if keys, _ := sliceServiceKey(csl); len(keys) != 1 || keys[0] != "default/web" {
		t.Errorf("slice indexed under %v, want [default/web]", keys)
	}
	want := []cachedEndpoint{ // an endpoint is its first address: not 10.244.1.6
		{addr: [4]byte{10, 244, 1, 5}, flags: epReady | epServing | epOnNode},
		{addr: [4]byte{10, 244, 2, 7}, flags: epServing | epTerminating},
	}
	if len(csl.endpoints) != len(want) {
		t.Fatalf("endpoints %+v, want %+v", csl.endpoints, want)
	}
	for i := range want {
		if csl.endpoints[i] != want[i] {
			t.Errorf("endpoint %d = %+v, want %+v", i, csl.endpoints[i], want[i])
		}
	}
	for _, obj := range []any{cs, csl, cache.DeletedFinalStateUnknown{Key: "default/web", Obj: cs}} {
		if out, _ := transform(obj); out != obj {
			t.Errorf("transform changed %T", obj)
		}
	}
}

// Through real informers (over a fake clientset) the watcher programs the Services
// its records describe.
func TestWatcherProgramsFromRecords(t *testing.T) {
	svc := svcWith(nil)
	es := slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"}, ep{ip: "10.244.2.5", node: "node-2"})
	cs := fake.NewSimpleClientset(svc, es)
	m, err := NewManager(newFake(), 0)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(kubefake.Wrap(cs), m, nodeOpts, func(error) {}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case <-w.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher never synced")
	}
	applied, backends := m.Snapshot()
	if len(applied) != 1 || applied[0].Service != "default/web" || len(applied[0].Active) != 2 {
		t.Fatalf("programmed %+v, want default/web with 2 active backends", applied)
	}
	got := backends[applied[0].Active[0]]
	if want := (Backend{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080}); got != want {
		t.Errorf("first backend %v, want %v", got, want)
	}
}

// The transform drops discoveryv1 fields the records do not need but keeps every
// one Desired reads: a non-IPv4 slice contributes no backends.
func TestCachedSliceOtherAddressType(t *testing.T) {
	es := slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"})
	es.AddressType = discoveryv1.AddressTypeIPv6
	if got, err := Desired(svcWith(nil), []*discoveryv1.EndpointSlice{es}, nodeOpts); err != nil || len(got) != 1 || len(got[0].Active) != 0 {
		t.Errorf("an IPv6 slice gave %+v, want one frontend without backends", got)
	}
}

// OnPruned runs once, when the first pass has programmed every Service and before
// Synced closes (nothing else is applied meanwhile).
func TestWatcherOnPrunedAfterFirstPass(t *testing.T) {
	cs := fake.NewSimpleClientset(svcWith(nil), slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"}))
	m, err := NewManager(newFake(), 0)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(kubefake.Wrap(cs), m, nodeOpts, func(error) {}, slog.New(slog.DiscardHandler))
	calls := 0
	w.OnPruned(func() {
		calls++
		if applied, _ := m.Snapshot(); len(applied) != 1 || applied[0].Service != "default/web" {
			t.Errorf("OnPruned ran with %+v programmed, want default/web", applied)
		}
		select {
		case <-w.Synced():
			t.Error("OnPruned ran after Synced closed")
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	select {
	case <-w.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher never synced")
	}
	if calls != 1 {
		t.Errorf("OnPruned ran %d times, want once", calls)
	}
}
