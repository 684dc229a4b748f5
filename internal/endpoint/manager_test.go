package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/ipam"
)

// fakeDatapath and fakeLinks stand in for BPF and netlink in these unit tests of the
// manager's bookkeeping; the real ones are exercised by the datapath and e2e tests.
type fakeDatapath struct {
	eps      map[netip.Addr]datapath.EndpointInfo
	attached map[string]int
}

func (f *fakeDatapath) UpsertEndpoint(ip netip.Addr, ep datapath.EndpointInfo) error {
	f.eps[ip] = ep
	return nil
}
func (f *fakeDatapath) DeleteEndpoint(ip netip.Addr) error { delete(f.eps, ip); return nil }
func (f *fakeDatapath) DeleteEndpointOf(ip netip.Addr, ifindex int) error {
	if cur, ok := f.eps[ip]; ok && cur.IfIndex != ifindex {
		return datapath.ErrEndpointNotOwned
	}
	delete(f.eps, ip)
	return nil
}
func (f *fakeDatapath) Endpoints() (map[netip.Addr]datapath.EndpointInfo, error) {
	return f.eps, nil
}
func (f *fakeDatapath) AttachEndpoint(ifindex int, name string) error {
	f.attached[name] = ifindex
	return nil
}
func (f *fakeDatapath) DetachEndpoint(ifindex int, name string) error {
	if cur, ok := f.attached[name]; ok && ifindex != 0 && cur != ifindex {
		return nil // another attachment's veth of the name
	}
	delete(f.attached, name)
	return nil
}

type fakeLinks struct {
	links  map[string]int
	routes map[netip.Addr]int
	down   map[int]bool // by index
	// failDeletes is how many DeleteLinkAt calls fail (errDeleteFailed) before they work.
	failDeletes int
}

var errDeleteFailed = errors.New("fake: delete failed")

func newFakeLinks() *fakeLinks {
	return &fakeLinks{links: map[string]int{}, routes: map[netip.Addr]int{}, down: map[int]bool{}}
}

func (f *fakeLinks) IfIndex(name string) (int, error) {
	if i, ok := f.links[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%s: %w", name, ErrLinkNotFound)
}
func (f *fakeLinks) SetLinkDown(index int) error { f.down[index] = true; return nil }
func (f *fakeLinks) DeleteLinkAt(index int, name string) error {
	if f.failDeletes > 0 {
		f.failDeletes--
		return errDeleteFailed
	}
	if f.links[name] == index {
		delete(f.links, name)
	}
	return nil
}
func (f *fakeLinks) DownPodVeths() (map[string]int, error) {
	out := map[string]int{}
	for name, idx := range f.links {
		if f.down[idx] {
			out[name] = idx
		}
	}
	return out, nil
}
func (f *fakeLinks) ReplacePodRoute(ip netip.Addr, ifindex int) error {
	f.routes[ip] = ifindex
	return nil
}
func (f *fakeLinks) DeletePodRoute(ip netip.Addr) error { delete(f.routes, ip); return nil }

type fixture struct {
	dir   string
	dp    *fakeDatapath
	links *fakeLinks
	pool  *ipam.Pool
	m     *Manager
}

func newFixture(t *testing.T, dir string, dp *fakeDatapath, links *fakeLinks) *fixture {
	t.Helper()
	pool, err := ipam.OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix("10.244.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(Config{Dir: filepath.Join(dir, "endpoints"), Node: "n1", MTU: 1500}, dp, links, pool)
	return &fixture{dir, dp, links, pool, m}
}

// add runs what the plugin does: allocate, build the veth (a fake link), register.
func (f *fixture) add(t *testing.T, id string, ifindex int) api.Endpoint {
	t.Helper()
	ref := api.PodRef{ContainerID: id, Namespace: "default", Pod: id[:min(len(id), api.MaxPodName)]}
	alloc, err := f.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	f.links.links[alloc.HostIfName] = ifindex
	ep, err := f.m.Put(api.Endpoint{PodRef: ref,
		IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: ifindex,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestManagerProgramsAndDeletes(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	ep := f.add(t, "ctr-a", 7)
	ip := netip.MustParseAddr(ep.IP)
	if f.dp.eps[ip].IfIndex != 7 || f.dp.attached[ep.HostIfName] != 7 || f.links.routes[ip] != 7 || ep.ID == 0 {
		t.Fatalf("after Put: map %+v attached %v routes %v id %d", f.dp.eps, f.dp.attached, f.links.routes, ep.ID)
	}
	if !strings.HasPrefix(ep.HostIfName, "myl") || len(ep.HostIfName) != 14 {
		t.Errorf("host veth name %q: want myl + 11 hex", ep.HostIfName)
	}
	if got := f.m.PodByIP(ip); got != "default/ctr-a" {
		t.Errorf("PodByIP = %q", got)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := f.m.Delete("ctr-a"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if len(f.dp.eps) != 0 || len(f.dp.attached) != 0 || len(f.links.routes) != 0 {
		t.Errorf("after Delete: map %v attached %v routes %v", f.dp.eps, f.dp.attached, f.links.routes)
	}
	if _, used, _ := f.pool.Usage(); used != 0 {
		t.Errorf("after Delete, %d IPs still allocated", used)
	}
	f.retired(t, ep.HostIfName, 7)
	f.reap(t)
	if len(f.links.links) != 0 {
		t.Errorf("after the reaper: links %v", f.links.links)
	}
}

// retired fails unless the veth name at index is down and waiting for the reaper.
func (f *fixture) retired(t *testing.T, name string, index int) {
	t.Helper()
	if f.links.links[name] != index || !f.links.down[index] {
		t.Errorf("veth %s: links %v down %v, want it kept at index %d and down", name, f.links.links, f.links.down, index)
	}
	if p := f.m.Reaper().Pending(); !slices.Contains(p, name) {
		t.Errorf("veth %s is not waiting for the reaper (pending %v)", name, p)
	}
}

// reap runs the reaper until nothing is pending, as the agent runs it, and fails on
// an error it reports.
func (f *fixture) reap(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.m.Reaper().Run(ctx, func(a Attempt) {
			if a.Err != nil {
				t.Errorf("reaper: %s: %v", a.Name, a.Err)
			}
			if len(f.m.Reaper().Pending()) == 0 {
				cancel()
			}
		})
	}()
	if len(f.m.Reaper().Pending()) == 0 {
		cancel()
	}
	<-done
}

func TestManagerRefusesUnallocatedIP(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	_, err := f.m.Put(api.Endpoint{PodRef: api.PodRef{ContainerID: "x"}, IP: "10.244.0.9", HostIfName: HostIfName("x")})
	if err == nil || !strings.Contains(err.Error(), "is not allocated to it") {
		t.Errorf("Put without Allocate: %v", err)
	}
}

// TestManagerRestore: a new manager over the same state adopts endpoints whose veth
// still exists, removes the one whose veth vanished, and clears stray map entries.
func TestManagerRestore(t *testing.T) {
	dir := t.TempDir()
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	f := newFixture(t, dir, dp, links)
	kept := f.add(t, "kept", 10)
	gone := f.add(t, "gone", 11)
	delete(links.links, gone.HostIfName)                                  // the veth vanished while the agent was down
	dp.eps[netip.MustParseAddr("10.244.0.200")] = datapath.EndpointInfo{} // stray entry
	dp.attached = map[string]int{}                                        // a new agent process knows nothing

	f2 := newFixture(t, dir, dp, links)
	adopted, removed, err := f2.m.Restore()
	if err != nil || adopted != 1 || removed != 1 {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 1, 1, nil", adopted, removed, err)
	}
	if got, ok := f2.m.Get("kept"); !ok || got.IP != kept.IP || got.ID != kept.ID {
		t.Errorf("kept endpoint after restore: %+v %v, want IP %s id %d", got, ok, kept.IP, kept.ID)
	}
	if _, ok := f2.m.Get("gone"); ok {
		t.Error("endpoint with a vanished veth was adopted")
	}
	if len(dp.eps) != 1 || dp.attached[kept.HostIfName] != 10 {
		t.Errorf("datapath after restore: map %v attached %v", dp.eps, dp.attached)
	}
	if ip, ok := f2.pool.Lookup("gone"); ok {
		t.Errorf("IP %v of the vanished endpoint is still allocated", ip)
	}
}

func TestManagerGC(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	a := f.add(t, "a", 1)
	f.add(t, "b", 2)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "half-made"}); err != nil { // ADD that never registered
		t.Fatal(err)
	}
	if removed, err := f.m.GC([]string{"a"}); err != nil || len(removed) != 1 || removed[0] != "b" {
		t.Fatalf("GC = %v, %v; want only b removed (half-made is in its grace period)", removed, err)
	}
	later := time.Now().Add(allocationGrace + time.Second)
	f.m.now = func() time.Time { return later }
	removed, err := f.m.GC([]string{"a"})
	if err != nil || len(removed) != 1 || removed[0] != "half-made" {
		t.Fatalf("GC after the grace period = %v, %v; want half-made removed", removed, err)
	}
	if _, ok := f.m.Get("a"); !ok {
		t.Error("GC removed a kept endpoint")
	}
	if _, used, _ := f.pool.Usage(); used != 1 {
		t.Errorf("after GC %d IPs allocated, want 1", used)
	}
	// GC answers once the veths are gone, not only retired.
	if len(f.links.links) != 1 || f.links.links[a.HostIfName] != 1 || len(f.m.Reaper().Pending()) != 0 {
		t.Errorf("after GC: links %v pending %v, want only a's veth", f.links.links, f.m.Reaper().Pending())
	}
}

// An ADD in progress (allocated, veth built, endpoint not yet registered) is not in
// the runtime's list of valid attachments; GC leaves it, and its Put succeeds.
func TestManagerGCDuringAdd(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	f.add(t, "old", 1)
	ref := api.PodRef{ContainerID: "new", Namespace: "default", Pod: "new"}
	alloc, err := f.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	f.links.links[alloc.HostIfName] = 9
	if removed, err := f.m.GC([]string{"old"}); err != nil || len(removed) != 0 {
		t.Fatalf("GC during ADD = %v, %v; want nothing removed", removed, err)
	}
	if _, ok := f.links.links[alloc.HostIfName]; !ok {
		t.Fatal("GC deleted the veth of an ADD in progress")
	}
	if _, err := f.m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: 9,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"}); err != nil {
		t.Fatalf("Put after GC: %v", err)
	}
	// Registered, it is an ordinary endpoint: a GC without it removes it at once.
	if removed, _ := f.m.GC([]string{"old"}); len(removed) != 1 || removed[0] != "new" {
		t.Errorf("GC of the registered endpoint = %v, want [new]", removed)
	}
}

// Release (a failed ADD's cleanup) gives back an allocation without an endpoint,
// and refuses for a container whose endpoint is registered: a second ADD for a live
// container that failed must not free the IP the endpoint still holds.
func TestManagerReleaseKeepsLiveEndpoints(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	x := f.add(t, "ctr-x", 7)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "ctr-x", Namespace: "default", Pod: "ctr-x"}); err != nil {
		t.Fatal(err) // the second ADD's allocate: the same IP
	}
	err := f.m.Release("ctr-x", "")
	if !errors.Is(err, ErrEndpointExists) || !strings.Contains(err.Error(), x.IP) || !strings.Contains(err.Error(), "CNI DEL") {
		t.Fatalf("Release of a live endpoint's container: %v; want ErrEndpointExists naming its IP and CNI DEL", err)
	}
	if owned, ok := f.pool.Lookup("ctr-x"); !ok || owned.String() != x.IP {
		t.Fatalf("ctr-x's IP after the refused release: %v, %v; want %s", owned, ok, x.IP)
	}
	failed, err := f.m.Allocate(api.PodRef{ContainerID: "ctr-failed"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.m.Release("ctr-failed", failed.Attempt); err != nil {
		t.Fatalf("Release of a failed ADD: %v", err)
	}
	if _, ok := f.pool.Lookup("ctr-failed"); ok {
		t.Error("a failed ADD's IP is still allocated after Release")
	}
}

// A stale PUT: an ADD registers its veth (index 7) only after a DEL and a new ADD of
// the container replaced it with a veth of the same name (index 8). The stale PUT is
// refused, and its undoing leaves the live attachment programmed: its programs stay
// on the veth (a pod whose from_pod program is gone is not checked at all), its map
// entry and its route.
func TestManagerStalePutLeavesTheNewAttachment(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	live := f.add(t, "ctr-s", 8)
	ip := netip.MustParseAddr(live.IP)
	stale := live
	stale.HostIfIndex = 7
	if _, err := f.m.Put(stale); err == nil || !strings.Contains(err.Error(), "index 8, not 7") {
		t.Fatalf("the stale PUT (index 7, the veth is at 8) = %v, want refused naming both indexes", err)
	}
	if f.dp.attached[live.HostIfName] != 8 || f.dp.eps[ip].IfIndex != 8 || f.links.routes[ip] != 8 {
		t.Errorf("after the stale PUT: attached %v map %+v routes %v, want the live veth (index 8) programmed",
			f.dp.attached, f.dp.eps, f.links.routes)
	}
}

// failingAttach is a datapath whose attach fails (after it has written the map entry).
type failingAttach struct{ *fakeDatapath }

func (failingAttach) AttachEndpoint(int, string) error { return errors.New("fake: attach failed") }

// TestManagerFailedRePutKeepsTheLiveEndpoint: a PUT retried for a registered endpoint
// (same veth, same address) that fails midway leaves that endpoint programmed as
// registered (map entry with its MACs, program, route), never removed while the agent
// still lists it.
func TestManagerFailedRePutKeepsTheLiveEndpoint(t *testing.T) {
	f := newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
	live := f.add(t, "ctr-r", 8)
	ip := netip.MustParseAddr(live.IP)
	f.m.dp = failingAttach{f.dp}
	again := live
	again.PodMAC = "02:00:00:00:00:99"
	if _, err := f.m.Put(again); err == nil || !strings.Contains(err.Error(), "attach failed") {
		t.Fatalf("re-PUT with a failing attach = %v, want the attach error", err)
	}
	if f.dp.attached[live.HostIfName] != 8 || f.dp.eps[ip].IfIndex != 8 || f.links.routes[ip] != 8 {
		t.Errorf("after the failed re-PUT: attached %v map %+v routes %v, want the live veth (index 8) programmed",
			f.dp.attached, f.dp.eps, f.links.routes)
	}
	if got := f.dp.eps[ip].PodMAC.String(); got != live.PodMAC {
		t.Errorf("map entry's pod MAC %s after the failed re-PUT, want the registered %s", got, live.PodMAC)
	}
	if _, ok := f.m.Get("ctr-r"); !ok {
		t.Errorf("the endpoint is no longer registered after a failed re-PUT")
	}
}
