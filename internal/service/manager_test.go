package service

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
)

// fakeDatapath is the maps as plain Go maps: enough to test the Manager's bookkeeping.
type fakeDatapath struct {
	services map[datapath.Frontend]datapath.Service
	backends map[uint32]datapath.Backend
	// ctServices and ctBackends are the ids conntrack entries name.
	ctServices, ctBackends []uint32
	// maxFrontends and maxSlots are what ServiceCapacity says; 0 bounds nothing.
	maxFrontends, maxSlots int
}

func newFake() *fakeDatapath {
	return &fakeDatapath{services: map[datapath.Frontend]datapath.Service{}, backends: map[uint32]datapath.Backend{}}
}

func (f *fakeDatapath) UpsertBackend(id uint32, b datapath.Backend) error {
	f.backends[id] = b
	return nil
}

func (f *fakeDatapath) DeleteBackend(id uint32) error {
	delete(f.backends, id)
	return nil
}

func (f *fakeDatapath) UpsertService(fe datapath.Frontend, s datapath.Service) error {
	for _, id := range s.Backends {
		if _, ok := f.backends[id]; !ok {
			return fmt.Errorf("service refers to backend %d, which is not programmed", id)
		}
	}
	f.services[fe] = s
	return nil
}

func (f *fakeDatapath) DeleteService(fe datapath.Frontend) error {
	delete(f.services, fe)
	return nil
}

func (f *fakeDatapath) Services() ([]datapath.ServiceEntry, error) {
	var out []datapath.ServiceEntry
	for fe, s := range f.services {
		out = append(out, datapath.ServiceEntry{Frontend: fe, Service: s})
	}
	return out, nil
}

func (f *fakeDatapath) Backends() (map[uint32]datapath.Backend, error) {
	out := map[uint32]datapath.Backend{}
	for id, b := range f.backends {
		out[id] = b
	}
	return out, nil
}

func (f *fakeDatapath) ConntrackIDs() (services, backends []uint32, err error) {
	return f.ctServices, f.ctBackends, nil
}

func (f *fakeDatapath) ServiceCapacity() (frontends, slots int) { return f.maxFrontends, f.maxSlots }

// backendsOf returns the addr:port of every backend a frontend selects from.
func (f *fakeDatapath) active(t *testing.T, fe datapath.Frontend) []string {
	t.Helper()
	s, ok := f.services[fe]
	if !ok {
		t.Fatalf("frontend %s is not programmed", FrontendString(fe))
	}
	var out []string
	for _, id := range s.Backends {
		b := f.backends[id]
		out = append(out, netip.AddrPortFrom(b.Addr, b.Port).String())
	}
	return out
}

func frontend(ip string, port uint16, active ...string) Frontend {
	fe := Frontend{Key: datapath.Frontend{Addr: netip.MustParseAddr(ip), Port: port, Proto: unix.IPPROTO_TCP},
		Service: "default/" + ip, Type: ClusterIP}
	for _, a := range active {
		fe.Active = append(fe.Active, be(a))
	}
	return fe
}

func TestManagerApplyUpdateRemove(t *testing.T) {
	dp := newFake()
	m, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := frontend("10.96.0.10", 80, "10.244.1.5:8080", "10.244.2.5:8080")
	b := frontend("10.96.0.11", 80, "10.244.1.5:8080")
	if err := m.Apply("default/a", []Frontend{a}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("default/b", []Frontend{b}); err != nil {
		t.Fatal(err)
	}
	if got := dp.active(t, a.Key); !slices.Equal(got, []string{"10.244.1.5:8080", "10.244.2.5:8080"}) {
		t.Errorf("a selects %v", got)
	}
	if len(dp.backends) != 2 {
		t.Errorf("%d backends programmed, want 2 (10.244.1.5:8080 is shared)", len(dp.backends))
	}
	idA := dp.services[a.Key].ID

	// Scale down: a keeps its id; the backend only a used goes; the shared one stays.
	a.Active = a.Active[:1]
	if err := m.Apply("default/a", []Frontend{a}); err != nil {
		t.Fatal(err)
	}
	if dp.services[a.Key].ID != idA {
		t.Errorf("frontend id changed on update: %d -> %d", idA, dp.services[a.Key].ID)
	}
	if len(dp.backends) != 1 {
		t.Errorf("backends after scale-down: %v, want only 10.244.1.5:8080", dp.backends)
	}
	// Delete a: b still works.
	if err := m.Apply("default/a", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := dp.services[a.Key]; ok {
		t.Error("a is still programmed after its Service was deleted")
	}
	if got := dp.active(t, b.Key); !slices.Equal(got, []string{"10.244.1.5:8080"}) {
		t.Errorf("b selects %v after a was deleted", got)
	}
	if err := m.Apply("default/b", nil); err != nil {
		t.Fatal(err)
	}
	if len(dp.services) != 0 || len(dp.backends) != 0 {
		t.Errorf("left behind: services %v backends %v", dp.services, dp.backends)
	}
}

// TestManagerTerminatingBackendKept: a terminating backend takes no new connections
// but stays programmed, so flows pinned to its id keep going.
func TestManagerTerminatingBackendKept(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	fe := frontend("10.96.0.10", 80, "10.244.1.5:8080", "10.244.2.5:8080")
	_ = m.Apply("default/a", []Frontend{fe})
	fe.Active, fe.Terminating = fe.Active[:1], fe.Active[1:]
	if err := m.Apply("default/a", []Frontend{fe}); err != nil {
		t.Fatal(err)
	}
	if got := dp.active(t, fe.Key); !slices.Equal(got, []string{"10.244.1.5:8080"}) {
		t.Errorf("selects %v, want only the ready backend", got)
	}
	if len(dp.backends) != 2 {
		t.Errorf("backends %v: the terminating one must stay", dp.backends)
	}
}

// TestManagerAdoptsAfterRestart: a new Manager over the same maps keeps every id, and
// Prune removes only what no Service claims.
func TestManagerAdoptsAfterRestart(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	keep := frontend("10.96.0.10", 80, "10.244.1.5:8080")
	gone := frontend("10.96.0.11", 80, "10.244.2.5:8080")
	_ = m.Apply("default/keep", []Frontend{keep})
	_ = m.Apply("default/gone", []Frontend{gone})
	before := dp.services[keep.Key]
	beforeBackends := maps2(dp.backends)

	m2, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply("default/keep", []Frontend{keep}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Prune(); err != nil {
		t.Fatal(err)
	}
	after := dp.services[keep.Key]
	if after.ID != before.ID || !slices.Equal(after.Backends, before.Backends) {
		t.Errorf("ids changed across restart: %+v -> %+v", before, after)
	}
	if _, ok := dp.services[gone.Key]; ok {
		t.Error("Prune left the frontend of a Service deleted while the agent was down")
	}
	for id, b := range dp.backends {
		if beforeBackends[id] != b {
			t.Errorf("backend %d changed across restart", id)
		}
	}
	if len(dp.backends) != 1 {
		t.Errorf("backends after prune: %v, want only 10.244.1.5:8080", dp.backends)
	}
}

func maps2(m map[uint32]datapath.Backend) map[uint32]datapath.Backend {
	out := map[uint32]datapath.Backend{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestManagerMaglev: the table holds backend ids, and two Services over the same pods
// get the same table (so the datapath can share it).
func TestManagerMaglev(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 251)
	a := frontend("10.96.0.10", 80, "10.244.1.5:8080", "10.244.2.5:8080")
	b := frontend("10.96.0.11", 80, "10.244.1.5:8080", "10.244.2.5:8080")
	_ = m.Apply("default/a", []Frontend{a})
	_ = m.Apply("default/b", []Frontend{b})
	ta, tb := dp.services[a.Key].Maglev, dp.services[b.Key].Maglev
	if len(ta) != 251 || !slices.Equal(ta, tb) {
		t.Fatalf("tables: %d entries, equal %v; want 251 and equal", len(ta), slices.Equal(ta, tb))
	}
	for i, id := range ta {
		if !slices.Contains(dp.services[a.Key].Backends, id) {
			t.Fatalf("entry %d is backend %d, not one of %v", i, id, dp.services[a.Key].Backends)
		}
	}
}

// A frontend with as many ready backends as the Maglev table has entries is written
// with random selection (no table), not refused.
func TestManagerMaglevMoreBackendsThanTable(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 251)
	var addrs []string
	for i := range 251 {
		addrs = append(addrs, fmt.Sprintf("10.244.%d.%d:8080", i/200, i%200+1))
	}
	big := frontend("10.96.0.12", 80, addrs...)
	if err := m.Apply("default/big", []Frontend{big}); err != nil {
		t.Fatal(err)
	}
	if s := dp.services[big.Key]; len(s.Backends) != 251 || s.Maglev != nil {
		t.Errorf("%d backends, a table of %d entries; want 251 and none (random)", len(s.Backends), len(s.Maglev))
	}
}

// Each frontend type gets its flag: NodePort and ExternalIP frontends are marked
// (socket-LB refuses the node's own sockets only a ClusterIP without backends), a
// ClusterIP is not.
func TestManagerFrontendTypeFlags(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	cip := frontend("10.96.0.10", 80)
	np := frontend("198.18.0.11", 30080)
	np.Type = NodePort
	ext := frontend("203.0.113.250", 80)
	ext.Type = ExternalIP
	if err := m.Apply("default/web", []Frontend{cip, np, ext}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fe   Frontend
		want datapath.ServiceFlags
	}{{cip, 0}, {np, datapath.ServiceNodePort}, {ext, datapath.ServiceExternalIP}} {
		if got := dp.services[c.fe.Key].Flags; got != c.want {
			t.Errorf("%s frontend %v: flags %#x, want %#x", c.fe.Type, c.fe.Key, got, c.want)
		}
	}
}

// An externalTrafficPolicy: Local frontend gets its local pool and a Maglev table over
// it only (outside clients get the node's own backends, the node's clients all), and a
// change of the local count alone is written again.
func TestManagerExternalLocal(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 251)
	fe := frontend("198.18.0.11", 30080, "10.244.1.5:8080", "10.244.0.5:8080", "10.244.2.5:8080")
	fe.Type, fe.ExternalLocal, fe.Local = NodePort, true, 1
	if err := m.Apply("default/web", []Frontend{fe}); err != nil {
		t.Fatal(err)
	}
	s := dp.services[fe.Key]
	if s.Flags != datapath.ServiceNodePort|datapath.ServiceExternalLocal || s.LocalBackends != 1 || len(s.Backends) != 3 {
		t.Fatalf("wrote flags %#x, %d local of %d backends; want NodePort|ExternalLocal, 1 of 3", s.Flags, s.LocalBackends, len(s.Backends))
	}
	if len(s.Maglev) != 251 {
		t.Fatalf("Maglev table of %d entries, want 251", len(s.Maglev))
	}
	for i, id := range s.Maglev {
		if id != s.Backends[0] {
			t.Fatalf("Maglev entry %d is backend %v, want the local %v only", i, dp.backends[id], dp.backends[s.Backends[0]])
		}
	}
	fe.Local = 0
	if err := m.Apply("default/web", []Frontend{fe}); err != nil {
		t.Fatal(err)
	}
	if s := dp.services[fe.Key]; s.LocalBackends != 0 || s.Maglev != nil {
		t.Errorf("after the local endpoint left: %d local backends, table of %d; want 0 and none", s.LocalBackends, len(s.Maglev))
	}
}

// The cache of Maglev tables stays within its bound however many distinct backend
// sets the Services have, and a table recomputed after the cache was emptied is the
// same.
func TestMaglevCacheBounded(t *testing.T) {
	const size = 65521 // 256 KiB a table: 32 fill the cache
	dp := newFake()
	m, err := NewManager(dp, size)
	if err != nil {
		t.Fatal(err)
	}
	first := frontend("10.96.2.0", 80, "10.244.0.1:80", "10.244.0.2:80")
	if err := m.Apply("default/s0", []Frontend{first}); err != nil {
		t.Fatal(err)
	}
	addrs := func() []datapath.Backend {
		var out []datapath.Backend
		for _, id := range dp.services[first.Key].Maglev {
			out = append(out, dp.backends[id])
		}
		return out
	}
	want := addrs()
	for i := 1; i < 100; i++ {
		fe := frontend(fmt.Sprintf("10.96.2.%d", i), 80, "10.244.0.1:80", fmt.Sprintf("10.244.1.%d:80", i))
		if err := m.Apply(fmt.Sprintf("default/s%d", i), []Frontend{fe}); err != nil {
			t.Fatal(err)
		}
		if m.tableSize > maglevCacheBytes {
			t.Fatalf("after %d backend sets the cache holds %d bytes, over %d", i+1, m.tableSize, maglevCacheBytes)
		}
	}
	_ = m.Apply("default/s0", nil)
	if err := m.Apply("default/s0", []Frontend{first}); err != nil {
		t.Fatal(err)
	}
	if got := addrs(); len(got) != size || !slices.Equal(got, want) {
		t.Error("the table recomputed after the cache was emptied differs")
	}
}
