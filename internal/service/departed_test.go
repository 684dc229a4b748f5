package service

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
)

// departedIDs returns the (frontend id, backend id) pairs m has departed, sorted.
func departedIDs(m *Manager) []datapath.ServiceBackend {
	var out []datapath.ServiceBackend
	for _, d := range m.Departed() {
		out = append(out, d.IDs)
	}
	slices.SortFunc(out, func(a, b datapath.ServiceBackend) int {
		if a.Service != b.Service {
			return int(a.Service) - int(b.Service)
		}
		return int(a.Backend) - int(b.Backend)
	})
	return out
}

// TestManagerDepartedSharedBackend: a backend that leaves one Service's endpoints
// while another Service (a hand-made EndpointSlice in another namespace) still lists
// it keeps its id; the Manager records the pair (the first Service's frontend, the
// backend), so the first Service's flows pinned to it can be ended. One deleted
// outright (no Service lists it) is not recorded: its deletion ends them.
func TestManagerDepartedSharedBackend(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	var heard []Departure
	m.OnDeparture(func(d Departure) { heard = append(heard, d) })
	s1 := frontend("10.96.0.10", 53, "10.244.1.5:53", "10.244.2.5:53")
	s1.Key.Proto = unix.IPPROTO_UDP
	s2 := frontend("10.96.0.20", 53, "10.244.1.5:53") // ns b lists a's pod
	s2.Key.Proto = unix.IPPROTO_UDP
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("b/s2", []Frontend{s2}); err != nil {
		t.Fatal(err)
	}
	s1ID := dp.services[s1.Key].ID
	x := dp.services[s2.Key].Backends[0]
	if got := departedIDs(m); len(got) != 0 {
		t.Fatalf("departed before anything left: %v", got)
	}

	// X (10.244.1.5:53) leaves s1; s2 keeps it, under the same id.
	s1.Active = s1.Active[1:]
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := dp.backends[x]; !ok {
		t.Fatalf("backend %d went, but s2 still lists it", x)
	}
	want := []datapath.ServiceBackend{{Service: s1ID, Backend: x}}
	if got := departedIDs(m); !slices.Equal(got, want) {
		t.Fatalf("departed %v, want %v (X left s1, s2 keeps it)", got, want)
	}
	if len(heard) != 1 || heard[0].Frontend != s1.Key || heard[0].Backend != be("10.244.1.5:53") {
		t.Errorf("OnDeparture heard %+v, want one of s1's frontend and 10.244.1.5:53", heard)
	}

	// Forgotten once the GC has ended its flows; a later departure of the same
	// pair (X came back and left again) survives forgetting the earlier one.
	first := m.Departed()
	s1.Active = append([]Backend{be("10.244.1.5:53")}, s1.Active...)
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	if got := departedIDs(m); len(got) != 0 {
		t.Errorf("departed %v after X rejoined s1, want none (its flows are s1's again)", got)
	}
	s1.Active = s1.Active[1:]
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	m.Forget(first)
	if got := departedIDs(m); !slices.Equal(got, want) {
		t.Errorf("departed %v after forgetting an earlier departure, want the later one %v", got, want)
	}
	m.Forget(m.Departed())
	if got := departedIDs(m); len(got) != 0 {
		t.Errorf("departed %v after Forget, want none", got)
	}

	// s1 deleted while X is s2's: recorded for s1's old id (connected sockets
	// through its address would stay on X). Y (only s1's) is deleted: not recorded.
	s1.Active = append(s1.Active, be("10.244.1.5:53"))
	sortBackends(s1.Active)
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	m.Forget(m.Departed())
	if err := m.Apply("a/s1", nil); err != nil {
		t.Fatal(err)
	}
	if got := departedIDs(m); !slices.Equal(got, want) {
		t.Errorf("departed %v after s1 was deleted, want %v", got, want)
	}
	m.Forget(m.Departed())

	// X leaves s2, its last Service: deleted, nothing recorded.
	if err := m.Apply("b/s2", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := dp.backends[x]; ok {
		t.Error("X still programmed after its last Service let it go")
	}
	if got := departedIDs(m); len(got) != 0 {
		t.Errorf("departed %v for a deleted backend, want none", got)
	}
}

// TestManagerTerminatingNotDeparted: a backend that turns terminating stays listed
// (its open flows finish): no departure.
func TestManagerTerminatingNotDeparted(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	s1 := frontend("10.96.0.10", 80, "10.244.1.5:8080", "10.244.2.5:8080")
	s2 := frontend("10.96.0.20", 80, "10.244.1.5:8080")
	_ = m.Apply("a/s1", []Frontend{s1})
	_ = m.Apply("b/s2", []Frontend{s2})
	s1.Active, s1.Terminating = s1.Active[1:], s1.Active[:1]
	if err := m.Apply("a/s1", []Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	if got := departedIDs(m); len(got) != 0 {
		t.Errorf("departed %v for a terminating backend, want none", got)
	}
}
