package service

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
)

// fakeClock is a settable now for idSet.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// withClock makes m's id sets read c.
func withClock(m *Manager, c *fakeClock) {
	m.beIDs.now, m.feIDs.now = c.now, c.now
}

func TestIDSetQuarantine(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newIDSet(time.Hour)
	s.now = c.now
	a, _ := s.next()
	b, _ := s.next()
	s.free(a)
	if id, _ := s.next(); id == a {
		t.Fatalf("id %d reused at once after free", a)
	}
	c.t = c.t.Add(59 * time.Minute)
	if id, _ := s.next(); id == a {
		t.Fatalf("id %d reused within its quarantine", a)
	}
	if !s.quarantined(a) {
		t.Errorf("id %d not listed as quarantined", a)
	}
	c.t = c.t.Add(2 * time.Minute)
	if id, _ := s.next(); id != a {
		t.Errorf("after the quarantine got id %d, want the freed %d back", id, a)
	}
	s.hold(b) // in use: hold does nothing
	if s.quarantined(b) {
		t.Errorf("id %d in use was put in quarantine", b)
	}
	s.hold(50) // named by conntrack at start
	for i := 0; i < 100; i++ {
		if id, _ := s.next(); id == 50 {
			t.Fatal("id 50, held for conntrack, was handed out")
		}
	}
}

// A backend deleted and a new one created at once never share an id: conntrack
// entries of the old one's flows may still name it.
func TestManagerBackendIDNotReused(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	c := &fakeClock{t: time.Unix(1000, 0)}
	withClock(m, c)
	a := frontend("10.96.0.10", 80, "10.244.1.5:8080")
	if err := m.Apply("default/a", []Frontend{a}); err != nil {
		t.Fatal(err)
	}
	oldID := dp.services[a.Key].Backends[0]
	b := frontend("10.96.0.11", 80, "10.244.9.9:9090")
	_ = m.Apply("default/a", nil)
	if err := m.Apply("default/b", []Frontend{b}); err != nil {
		t.Fatal(err)
	}
	if id := dp.services[b.Key].Backends[0]; id == oldID {
		t.Fatalf("backend id %d of a's deleted pod went to b's pod at once", id)
	}
	// Past the quarantine (the longest conntrack timeout) the id is free again.
	c.t = c.t.Add(datapath.ServiceCTMaxTimeout + time.Second)
	d := frontend("10.96.0.12", 80, "10.244.7.7:7070")
	if err := m.Apply("default/d", []Frontend{d}); err != nil {
		t.Fatal(err)
	}
	if id := dp.services[d.Key].Backends[0]; id != oldID {
		t.Errorf("after the quarantine backend got id %d, want the freed %d", id, oldID)
	}
}

// Ids that conntrack entries name when the agent starts (freed by the previous run)
// are not handed out.
func TestManagerHoldsConntrackIDsAtStart(t *testing.T) {
	dp := newFake()
	dp.ctServices, dp.ctBackends = []uint32{1, 2}, []uint32{1, 2, 3}
	m, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	fe := frontend("10.96.0.10", 80, "10.244.1.5:8080")
	if err := m.Apply("default/a", []Frontend{fe}); err != nil {
		t.Fatal(err)
	}
	s := dp.services[fe.Key]
	if s.ID <= 2 || s.Backends[0] <= 3 {
		t.Errorf("service id %d, backend id %d: want ids not named by conntrack (service > 2, backend > 3)", s.ID, s.Backends[0])
	}
}

// Deleting a Service never removes a frontend another Service now owns: NodePort N
// moves from a (deleted, but its leftovers still trigger a sync) to b.
func TestManagerFrontendOwnership(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	nodePort := frontend("192.168.0.11", 30080, "10.244.1.5:8080")
	nodePort.Type = NodePort
	a := frontend("10.96.0.10", 80, "10.244.1.5:8080")
	if err := m.Apply("default/a", []Frontend{a, nodePort}); err != nil {
		t.Fatal(err)
	}
	idA := dp.services[nodePort.Key].ID
	// b is created with the same NodePort before a's deletion is seen.
	nb := nodePort
	nb.Active = []Backend{be("10.244.2.6:9090")}
	b := frontend("10.96.0.20", 80, "10.244.2.6:9090")
	if err := m.Apply("default/b", []Frontend{b, nb}); err != nil {
		t.Fatal(err)
	}
	if id := dp.services[nodePort.Key].ID; id == idA {
		t.Errorf("b took over the NodePort with a's service id %d: a's flows would pass for b's", id)
	}
	// a's deletion (or its EndpointSlice's, later) arrives.
	for i := 0; i < 2; i++ {
		if err := m.Apply("default/a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := dp.active(t, nodePort.Key); !slices.Equal(got, []string{"10.244.2.6:9090"}) {
		t.Errorf("NodePort selects %v after a was deleted, want b's 10.244.2.6:9090", got)
	}
	if _, ok := dp.services[a.Key]; ok {
		t.Error("a's ClusterIP frontend is still programmed")
	}
	if _, ok := dp.backends[dp.services[nodePort.Key].Backends[0]]; !ok {
		t.Error("b's backend is not programmed")
	}
	// Deleting b removes it; nothing is left.
	if err := m.Apply("default/b", nil); err != nil {
		t.Fatal(err)
	}
	if len(dp.services) != 0 || len(dp.backends) != 0 {
		t.Errorf("left behind: services %v backends %v", dp.services, dp.backends)
	}
	if names := m.ServiceNames(); len(names) != 0 {
		t.Errorf("ServiceNames = %v after every Service was deleted", names)
	}
}

// Maglev picks the same backend for a flow on every node: two managers (nodes) whose
// backend id histories differ, and which get the backends in different orders, build
// tables that map every entry to the same backend address.
func TestManagerMaglevSameOnEveryNode(t *testing.T) {
	const size = 251
	backends := []string{"10.244.1.5:8080", "10.244.2.7:8080", "10.244.3.9:8080", "10.244.4.2:8080"}
	fe := frontend("10.96.0.10", 80, backends...)

	dp1 := newFake()
	m1, _ := NewManager(dp1, size)
	if err := m1.Apply("default/web", []Frontend{fe}); err != nil {
		t.Fatal(err)
	}

	// Node 2 saw other Services come and go first, and lists the backends reversed.
	dp2 := newFake()
	m2, _ := NewManager(dp2, size)
	for i := 0; i < 7; i++ {
		churn := frontend(fmt.Sprintf("10.96.1.%d", i), 80, fmt.Sprintf("10.244.9.%d:80", i), backends[i%len(backends)])
		if err := m2.Apply("default/churn", []Frontend{churn}); err != nil {
			t.Fatal(err)
		}
	}
	_ = m2.Apply("default/churn", nil)
	fe2 := fe
	fe2.Active = slices.Clone(fe.Active)
	slices.Reverse(fe2.Active)
	if err := m2.Apply("default/web", []Frontend{fe2}); err != nil {
		t.Fatal(err)
	}

	s1, s2 := dp1.services[fe.Key], dp2.services[fe.Key]
	if slices.Equal(s1.Backends, s2.Backends) {
		t.Fatalf("both nodes have backend ids %v: the test needs differing id histories", s1.Backends)
	}
	addr := func(dp *fakeDatapath, id uint32) netip.AddrPort {
		b := dp.backends[id]
		return netip.AddrPortFrom(b.Addr, b.Port)
	}
	if len(s1.Maglev) != size || len(s2.Maglev) != size {
		t.Fatalf("tables of %d and %d entries, want %d", len(s1.Maglev), len(s2.Maglev), size)
	}
	seen := map[netip.AddrPort]bool{}
	for i := range s1.Maglev {
		a1, a2 := addr(dp1, s1.Maglev[i]), addr(dp2, s2.Maglev[i])
		if a1 != a2 {
			t.Fatalf("entry %d: node 1 picks %v, node 2 picks %v", i, a1, a2)
		}
		seen[a1] = true
	}
	if len(seen) != len(backends) {
		t.Errorf("tables use %d backends, want all %d", len(seen), len(backends))
	}
}

// The periodic resync syncs every Service the cluster has and every one still
// programmed, so a deletion whose event was missed is repaired.
func TestResyncKeys(t *testing.T) {
	list := func() []string { return []string{"default/b", "default/c"} }
	got := resyncKeys(list, []string{"default/a", "default/b"})
	slices.Sort(got)
	if want := []string{"default/a", "default/b", "default/c"}; !slices.Equal(got, want) {
		t.Errorf("resyncKeys = %v, want %v", got, want)
	}
}

// A tenant flipping a Service's frontends on and off (externalIPs set and cleared)
// frees ids by the thousand each time: what waits in quarantine stays bounded, the
// ids no flow names are handed out again instead of ever new ones, and those that
// conntrack names stay out of use.
func TestManagerFlippingServiceIDsBounded(t *testing.T) {
	dp := newFake()
	m, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var fes []Frontend
	for i := range n {
		fes = append(fes, frontend(fmt.Sprintf("203.0.%d.%d", i/250, i%250+1), 80, "10.244.1.5:8080"))
	}
	if err := m.Apply("t/flip", fes); err != nil {
		t.Fatal(err)
	}
	named := dp.services[fes[0].Key].ID // a flow through the first frontend
	dp.ctServices = []uint32{named}
	for range 2 * freedMax / n {
		if err := m.Apply("t/flip", nil); err != nil {
			t.Fatal(err)
		}
		if err := m.Apply("t/flip", fes); err != nil {
			t.Fatal(err)
		}
		for _, fe := range fes {
			if dp.services[fe.Key].ID == named {
				t.Fatalf("id %d, named by conntrack, was handed out again", named)
			}
		}
	}
	if len(m.feIDs.freed) > freedMax || m.feIDs.last > freedMax+3*n {
		t.Errorf("after %d frees: %d ids wait in quarantine, the highest id is %d; want at most %d and %d",
			2*freedMax, len(m.feIDs.freed), m.feIDs.last, freedMax, freedMax+3*n)
	}
	if !m.feIDs.quarantined(named) {
		t.Errorf("id %d, named by conntrack, left quarantine", named)
	}
}
