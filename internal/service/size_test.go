package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

// bigService is a Service named name of ports TCP ports (p0, p1, ...) and
// externalIPs external IPs; mut, when set, changes it further.
func bigService(name string, ports, externalIPs int, mut func(*corev1.Service)) *corev1.Service {
	return svcWith(func(s *corev1.Service) {
		s.Name = name
		s.Spec.Ports = nil
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)})
		}
		for i := range externalIPs {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, fmt.Sprintf("203.0.%d.%d", 100+i/250, 1+i%250))
		}
		if mut != nil {
			mut(s)
		}
	})
}

// bigSlice is an EndpointSlice of Service name serving every port of bigService
// (target port 8000+i) with endpoints ready endpoints on node-2.
func bigSlice(name string, ports, endpoints int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8000 + i))})
	}
	for i := range endpoints {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, 1+i%250)},
			NodeName: ptr.To("node-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The capacity of the Service maps, as bpf/lib/maps.h sizes them.
var mapsOpts = Options{NodeName: nodeOpts.NodeName, NodeIP: nodeOpts.NodeIP, MaxFrontends: 65536, MaxSlots: 131072}

// A Service whose frontends, or the backends they would hold together, can never
// fit in the node's maps is refused whole with one error naming it, the count, the
// limit and the fix, before anything of it is built: 20 ports × 101 frontends × 1,000
// endpoints took 78 MB when every frontend had its own backend list.
func TestDesiredRefusesServiceTooLarge(t *testing.T) {
	tests := []struct {
		name                     string
		ports, externals, endpts int
		want                     []string
	}{{
		name: "backend slots", ports: 20, externals: 100, endpts: 1000,
		want: []string{"default/big", "2020000 backend slots", "131072", "myelin_lb_slots", "reduce ports × externalIPs × endpoints"},
	}, {
		name: "frontends", ports: 100, externals: 1000,
		want: []string{"default/big", "100100 frontends", "65536", "myelin_lb_services", "reduce ports × externalIPs"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := newCachedService(bigService("big", tc.ports, tc.externals, nil))
			records := cachedSlices([]*discoveryv1.EndpointSlice{bigSlice("big", tc.ports, tc.endpts)}, mapsOpts.NodeName)
			var fes []Frontend
			var err error
			n := allocated(func() { fes, err = desired(svc, records, mapsOpts) })
			if !errors.Is(err, ErrServiceTooLarge) {
				t.Fatalf("got %d frontends, error %v; want ErrServiceTooLarge", len(fes), err)
			}
			if fes != nil {
				t.Errorf("got %d frontends with the error, want none", len(fes))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n > 1<<20 {
				t.Errorf("refusing it allocated %d bytes, want it refused before it is built", n)
			}
		})
	}
}

// A large Service that fits (4 ports × 52 frontends × 500 endpoints, 104,000 slots)
// is built with one backend list per port, shared by the port's frontends and
// clipped, so an append to one list never writes into another's.
func TestDesiredSharesBackends(t *testing.T) {
	const ports, externals, endpts = 4, 50, 500
	svc := newCachedService(bigService("big", ports, externals, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].NodePort = int32(30000 + i)
		}
	}))
	records := cachedSlices([]*discoveryv1.EndpointSlice{bigSlice("big", ports, endpts)}, mapsOpts.NodeName)
	var fes []Frontend
	var err error
	n := allocated(func() { fes, err = desired(svc, records, mapsOpts) })
	if err != nil {
		t.Fatal(err)
	}
	if want := ports * (1 + externals + 1); len(fes) != want {
		t.Fatalf("got %d frontends, want %d", len(fes), want)
	}
	if n > 4<<20 {
		t.Errorf("building it allocated %d bytes, want a few backend lists' worth", n)
	}
	first := map[string]Frontend{} // by port name
	types := map[FrontendType]int{}
	for _, fe := range fes {
		types[fe.Type]++
		if len(fe.Active) != endpts || len(fe.Terminating) != 0 {
			t.Fatalf("%s %s has %d active, %d terminating backends; want %d active", fe.Type, FrontendString(fe.Key), len(fe.Active), len(fe.Terminating), endpts)
		}
		if cap(fe.Active) != len(fe.Active) {
			t.Errorf("%s %s: active backends have room to append (cap %d, len %d)", fe.Type, FrontendString(fe.Key), cap(fe.Active), len(fe.Active))
		}
		f, ok := first[fe.PortName]
		if !ok {
			var port int
			fmt.Sscanf(fe.PortName, "p%d", &port)
			want := Backend{Addr: netip.MustParseAddr("10.244.0.1"), Port: uint16(8000 + port)}
			if fe.Active[0] != want || !slices.IsSortedFunc(fe.Active, func(a, b Backend) int { return a.Addr.Compare(b.Addr) }) {
				t.Errorf("port %s: backends start with %v (sorted: %v), want %v first and sorted", fe.PortName, fe.Active[0],
					slices.IsSortedFunc(fe.Active, func(a, b Backend) int { return a.Addr.Compare(b.Addr) }), want)
			}
			first[fe.PortName] = fe
			continue
		}
		if &fe.Active[0] != &f.Active[0] {
			t.Errorf("%s %s does not share the backend list of %s %s", fe.Type, FrontendString(fe.Key), f.Type, FrontendString(f.Key))
		}
	}
	if types[ClusterIP] != ports || types[ExternalIP] != ports*externals || types[NodePort] != ports {
		t.Errorf("frontends by type %v", types)
	}
}

// failingServices is fakeDatapath with a service map that refuses every write, as a
// full BPF hash map does.
type failingServices struct{ *fakeDatapath }

func (failingServices) UpsertService(datapath.Frontend, datapath.Service) error {
	return errors.New("update: argument list too long")
}

// When thousands of frontends of one Service fail, the error names the first few
// and counts the rest: it goes to the log and the loop status whole.
func TestManagerApplyErrorBounded(t *testing.T) {
	m, err := NewManager(failingServices{newFake()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fes []Frontend
	for i := range 5000 {
		fes = append(fes, frontend(fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250), 80, "10.244.1.5:8080"))
	}
	err = m.Apply("default/big", fes)
	if err == nil {
		t.Fatal("Apply into a full service map succeeded")
	}
	if msg := err.Error(); len(msg) > 1000 || !strings.Contains(msg, "and 4995 more errors") {
		t.Errorf("error of %d bytes: %.2000s; want the first %d and \"and 4995 more errors\"", len(msg), msg, maxErrors)
	}
}

// Through the watcher, a Service too large for the node's maps is refused whole
// with one error, even when the previous run had programmed part of it; the other
// Services are programmed as usual.
func TestWatcherRefusesServiceTooLarge(t *testing.T) {
	// 2 ports × 4 frontends × 10 endpoints: 80 slots, the maps hold 50.
	big, bigEPs := bigService("big", 2, 3, nil), bigSlice("big", 2, 10)
	cs := fake.NewSimpleClientset(big, bigEPs, svcWith(nil), slice(8080, "http", ep{ip: "10.244.1.5", node: "node-1"}))
	dp := newFake()
	dp.maxSlots = 50
	// The previous run, with larger maps, programmed one of its frontends.
	prev, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Apply("default/big", []Frontend{frontend("203.0.100.1", 1000, "10.244.0.1:8000")}); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []error
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			reported = append(reported, err)
		}
	}
	w := NewWatcher(kubefake.Wrap(cs), m, nodeOpts, report, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	select {
	case <-w.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher never synced")
	}
	cancel()
	<-done // nothing writes dp any more
	applied, _ := m.Snapshot()
	if len(applied) != 1 || applied[0].Service != "default/web" {
		t.Errorf("programmed %+v, want default/web only", applied)
	}
	if len(dp.services) != 1 {
		t.Errorf("the datapath has %d frontends, want default/web's one", len(dp.services))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) == 0 {
		t.Error("no error reported, want ErrServiceTooLarge for default/big")
	}
	for _, err := range reported { // once per sync of it: the first pass, then retries
		if !errors.Is(err, ErrServiceTooLarge) || !strings.Contains(err.Error(), "default/big") {
			t.Errorf("reported %v, want only ErrServiceTooLarge for default/big", err)
		}
	}
}

// The size check counts what backendsOf may give: an internalTrafficPolicy: Local
// ClusterIP takes this node's endpoints only, and endpoints neither ready, serving
// nor terminating (starting pods) none. 50 ports × 3,000 endpoints on other nodes (a
// DaemonSet's, 150,000 by a count of all) fit; the same with every endpoint counted
// is refused.
func TestDesiredSizeCountsWhatFrontendsTake(t *testing.T) {
	local := newCachedService(bigService("ds", 50, 0, func(s *corev1.Service) {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}))
	records := cachedSlices([]*discoveryv1.EndpointSlice{bigSlice("ds", 50, 3000)}, mapsOpts.NodeName)
	if fes, err := desired(local, records, mapsOpts); err != nil || len(fes) != 50 {
		t.Errorf("internalTrafficPolicy: Local over 3,000 remote endpoints: %d frontends, %v; want 50 and no error", len(fes), err)
	}
	starting := bigSlice("ds", 50, 3000)
	for i := range starting.Endpoints {
		starting.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false)}
	}
	cluster := newCachedService(bigService("ds", 50, 0, nil))
	if fes, err := desired(cluster, cachedSlices([]*discoveryv1.EndpointSlice{starting}, mapsOpts.NodeName), mapsOpts); err != nil || len(fes) != 50 {
		t.Errorf("3,000 starting endpoints: %d frontends, %v; want 50 and no error", len(fes), err)
	}
	if _, err := desired(cluster, records, mapsOpts); !errors.Is(err, ErrServiceTooLarge) {
		t.Errorf("50 ports × 3,000 ready endpoints (150,000 slots): %v; want ErrServiceTooLarge", err)
	}
}
