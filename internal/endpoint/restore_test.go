package endpoint

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// restartFixture is a node with endpoints a (index 1), b (2) and c (3) whose agent
// restarts: the returned function starts the new agent over the same state.
func restartFixture(t *testing.T) (*fixture, map[string]api.Endpoint, func() *fixture) {
	t.Helper()
	dir := t.TempDir()
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	f := newFixture(t, dir, dp, links)
	eps := map[string]api.Endpoint{"a": f.add(t, "a", 1), "b": f.add(t, "b", 2), "c": f.add(t, "c", 3)}
	return f, eps, func() *fixture {
		dp.attached = map[string]int{}
		return newFixture(t, dir, dp, links)
	}
}

func (f *fixture) writeRaw(t *testing.T, id string, b []byte) {
	t.Helper()
	f.writeRawAs(t, currentFormat, id, b)
}

// recordFormat is a file name a record can have (recordPath: the id, or the hash
// of a long one).
type recordFormat struct {
	name string
	path func(dir, containerID string) string
}

var currentFormat = recordFormat{"current format", recordPath}

func (f *fixture) recordFile(format recordFormat, id string) string {
	return format.path(filepath.Join(f.dir, "endpoints"), id)
}

// writeRawAs writes b as id's record in format, in place of the one there.
func (f *fixture) writeRawAs(t *testing.T, format recordFormat, id string, b []byte) {
	t.Helper()
	for _, other := range []recordFormat{currentFormat} {
		if err := os.Remove(f.recordFile(other, id)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.recordFile(format, id), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// noRecordOf fails t if id has a record file.
func (f *fixture) noRecordOf(t *testing.T, when, id string) {
	t.Helper()
	for _, format := range []recordFormat{currentFormat} {
		if _, err := os.Stat(f.recordFile(format, id)); !os.IsNotExist(err) && !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s: %s has a record in the %s: %v", when, id, format.name, err)
		}
	}
}

func (f *fixture) forge(t *testing.T, ep api.Endpoint) {
	t.Helper()
	b, err := json.Marshal(ep)
	if err != nil {
		t.Fatal(err)
	}
	f.writeRaw(t, ep.ContainerID, b)
}

// A truncated record costs only its own endpoint: the others
// are adopted, its container keeps its IP (no new pod gets it) and its map entry, and
// the error names the file.
func TestRestoreSurvivesACorruptRecord(t *testing.T) {
	for _, format := range []recordFormat{currentFormat} {
		t.Run(format.name, func(t *testing.T) {
			f, eps, restart := restartFixture(t)
			f.writeRawAs(t, format, "b", []byte(`{"containerID": "b", "ip": "10.2`))
			f2 := restart()
			adopted, removed, err := f2.m.Restore()
			if file := f.recordFile(format, "b"); adopted != 2 || removed != 0 || err == nil || !strings.Contains(err.Error(), file) {
				t.Fatalf("Restore = %d adopted, %d removed, %v; want 2, 0 and an error naming %s", adopted, removed, err, file)
			}
			for _, id := range []string{"a", "c"} {
				if got, ok := f2.m.Get(id); !ok || got.IP != eps[id].IP {
					t.Errorf("%s after restore: %+v %v", id, got, ok)
				}
			}
			bIP := netip.MustParseAddr(eps["b"].IP)
			if ip, ok := f2.pool.Lookup("b"); !ok || ip != bIP {
				t.Errorf("b's IP after restore: %v %v, want %v kept", ip, ok, bIP)
			}
			if f2.dp.eps[bIP].IfIndex != 2 {
				t.Errorf("b's map entry after restore: %+v, want it kept", f2.dp.eps[bIP])
			}
			// A second ADD of b (a runtime's, or forged) that fails on b's live veth
			// does not free b's IP for the next pod: its release is refused.
			again, err := f2.m.Allocate(api.PodRef{ContainerID: "b", Namespace: "default", Pod: "b"})
			if err != nil || again.IP != eps["b"].IP {
				t.Fatalf("second ADD of b: %+v %v, want b's IP %s", again, err, eps["b"].IP)
			}
			if err := f2.m.Release("b", again.Attempt); !errors.Is(err, ErrEndpointExists) || !strings.Contains(err.Error(), "could not read") {
				t.Fatalf("release of the failed second ADD of b: %v, want ErrEndpointExists saying its record was unreadable", err)
			}
			if ip, ok := f2.pool.Lookup("b"); !ok || ip != bIP {
				t.Fatalf("b's IP after the refused release: %v %v, want %v kept", ip, ok, bIP)
			}
			// DEL of b still works and removes the corrupt record with it.
			if err := f2.m.DeleteOwned("b", 2); err != nil {
				t.Fatal(err)
			}
			f.noRecordOf(t, "after b's DEL", "b")
		})
	}
}

// A record claiming the address of another live pod (forged or corrupt) is not
// adopted, whichever record is read first, and the live pod keeps everything.
func TestRestoreRefusesARecordForAnotherPodsIP(t *testing.T) {
	for _, owner := range []string{"a", "c"} { // records are read in file-name order: b between a and c
		f, eps, restart := restartFixture(t)
		forged := eps["b"]
		forged.IP = eps[owner].IP
		f.forge(t, forged)
		f2 := restart()
		adopted, removed, err := f2.m.Restore()
		if adopted != 2 || removed != 1 || err == nil || !strings.Contains(err.Error(), "endpoint record of b") {
			t.Fatalf("owner %s: Restore = %d adopted, %d removed, %v; want 2, 1 and an error naming b", owner, adopted, removed, err)
		}
		if _, ok := f2.m.Get("b"); ok {
			t.Errorf("owner %s: the forged record was adopted", owner)
		}
		ip := netip.MustParseAddr(eps[owner].IP)
		if got, ok := f2.m.Get(owner); !ok || got.IP != eps[owner].IP {
			t.Errorf("owner %s lost its endpoint: %+v %v", owner, got, ok)
		}
		if held, ok := f2.pool.Lookup(owner); !ok || held != ip {
			t.Errorf("owner %s's IP after restore: %v %v", owner, held, ok)
		}
		if f2.dp.eps[ip].IfIndex != eps[owner].HostIfIndex || f2.links.routes[ip] != eps[owner].HostIfIndex {
			t.Errorf("owner %s's map entry %+v route %d, want its veth %d", owner, f2.dp.eps[ip], f2.links.routes[ip], eps[owner].HostIfIndex)
		}
	}
}

// A record for an address outside the PodCIDR (the PodCIDR changed) is not adopted.
func TestRestoreRefusesARecordOutsideThePodCIDR(t *testing.T) {
	f, eps, restart := restartFixture(t)
	moved := eps["b"]
	moved.IP = "10.99.0.5"
	f.forge(t, moved)
	f2 := restart()
	adopted, removed, err := f2.m.Restore()
	if adopted != 2 || removed != 1 || err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 2, 1 and an error saying outside", adopted, removed, err)
	}
	if _, ok := f2.pool.Lookup("b"); ok {
		t.Error("b still holds an IP")
	}
}

// A record in the file of another container is treated as unreadable.
func TestRestoreRefusesARecordUnderAnotherName(t *testing.T) {
	for _, format := range []recordFormat{currentFormat} {
		t.Run(format.name, func(t *testing.T) {
			f, eps, restart := restartFixture(t)
			other := eps["a"]
			b, _ := json.Marshal(other)
			f.writeRawAs(t, format, "b", b) // b's file holds a's record
			f2 := restart()
			adopted, _, err := f2.m.Restore()
			if adopted != 2 || err == nil || !strings.Contains(err.Error(), `names container "a"`) {
				t.Fatalf("Restore = %d adopted, %v; want 2 and an error naming the mismatch", adopted, err)
			}
			if _, ok := f2.pool.Lookup("b"); !ok {
				t.Error("b lost its IP")
			}
		})
	}
}

// A record naming an id that is not a CNI container id ("../victim", which the
// removal of its record would turn into a path out of the records directory) is not
// read.
func TestRestoreRefusesARecordOfAForgedContainerID(t *testing.T) {
	f, eps, restart := restartFixture(t)
	victim := filepath.Join(f.dir, "victim.json") // what endpoints/../victim.json names
	if err := os.WriteFile(victim, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	forged := eps["b"]
	forged.ContainerID = "../victim"
	forged.HostIfName = HostIfName(forged.ContainerID)
	b, _ := json.Marshal(forged)
	if err := os.WriteFile(filepath.Join(f.dir, "endpoints", "victim.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	f2 := restart()
	adopted, _, err := f2.m.Restore()
	if adopted != 3 || err == nil || !strings.Contains(err.Error(), "not a CNI container id") {
		t.Fatalf("Restore = %d adopted, %v; want 3 and an error naming the id", adopted, err)
	}
	if _, ok := f2.m.Get(forged.ContainerID); ok {
		t.Error("the forged record was adopted")
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("a file outside the records directory was touched: %v", err)
	}
}

// A record whose pod reference the API refuses now (an older version wrote it: here
// a namespace with a newline, which would forge log lines) is not loaded: the error
// names its file, its container keeps its IP, and its DEL removes it.
func TestRestoreRefusesARecordOfAnInvalidPodRef(t *testing.T) {
	f, eps, restart := restartFixture(t)
	forged := eps["b"]
	forged.Namespace = "default\nlevel=ERROR msg=forged"
	f.forge(t, forged)
	f2 := restart()
	adopted, _, err := f2.m.Restore()
	if file := f.recordFile(currentFormat, "b"); adopted != 2 || err == nil || !strings.Contains(err.Error(), file) ||
		!strings.Contains(err.Error(), "not a Kubernetes name") {
		t.Fatalf("Restore = %d adopted, %v; want 2 and an error naming %s and the namespace", adopted, err, file)
	}
	if got, ok := f2.m.Get("b"); ok {
		t.Errorf("the record with an invalid namespace was loaded: %+v", got)
	}
	if ip, ok := f2.pool.Lookup("b"); !ok || ip.String() != eps["b"].IP {
		t.Errorf("b's IP after restore: %v %v, want %s kept", ip, ok, eps["b"].IP)
	}
	if err := f2.m.DeleteOwned("b", 2); err != nil {
		t.Fatal(err)
	}
	f.noRecordOf(t, "after b's DEL", "b")
}

// Temporary files a crash mid-write left among the records are removed at restart;
// the records are adopted.
func TestRestoreRemovesTemporaryFiles(t *testing.T) {
	f, _, restart := restartFixture(t)
	records := filepath.Join(f.dir, "endpoints")
	for _, name := range []string{".tmp-0123456789abcdef", "b.json.tmp"} {
		if err := os.WriteFile(filepath.Join(records, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f2 := restart()
	if adopted, _, err := f2.m.Restore(); adopted != 3 || err != nil {
		t.Fatalf("Restore = %d adopted, %v; want 3 and no error", adopted, err)
	}
	entries, _ := os.ReadDir(records)
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".json" {
			t.Errorf("%s is still in %s after the restart", e.Name(), records)
		}
	}
}

// An ADD in flight across the restart (allocated, not registered) gets GC's grace
// period from the new agent too.
func TestRestoreGivesAnADDInFlightItsGrace(t *testing.T) {
	f, _, restart := restartFixture(t)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "inflight"}); err != nil {
		t.Fatal(err)
	}
	f2 := restart()
	if _, _, err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if removed, err := f2.m.GC([]string{"a", "b", "c"}); err != nil || len(removed) != 0 {
		t.Fatalf("GC right after restart = %v, %v; want the ADD in flight kept", removed, err)
	}
}

// A record naming another pod's host veth (forged) is not adopted: deleting it would
// detach that pod's programs. The pod on that veth keeps everything.
func TestRestoreRefusesARecordOnAnotherPodsVeth(t *testing.T) {
	f, eps, restart := restartFixture(t)
	forged := eps["b"]
	forged.HostIfName, forged.HostIfIndex = eps["a"].HostIfName, eps["a"].HostIfIndex
	f.forge(t, forged)
	f2 := restart()
	adopted, _, err := f2.m.Restore()
	if adopted != 2 || err == nil || !strings.Contains(err.Error(), "names host veth") {
		t.Fatalf("Restore = %d adopted, %v; want 2 and an error naming the veth", adopted, err)
	}
	if err := f2.m.DeleteOwned("b", 0); err != nil {
		t.Fatal(err)
	}
	f2.intact(t, "after the forged record's DEL", eps["a"])
	if f2.dp.attached[eps["a"].HostIfName] != eps["a"].HostIfIndex {
		t.Errorf("a's programs after the forged record's DEL: %v", f2.dp.attached)
	}
}

// The agent died inside Put, after programming the map and before writing the
// record. The new agent removes the unrecorded map entry but keeps the allocation (the
// ADD is in flight); the plugin's register with the new agent then succeeds, or its
// failure releases the IP.
func TestRestoreAfterADeathBetweenMapAndRecord(t *testing.T) {
	f, _, restart := restartFixture(t)
	ref := api.PodRef{ContainerID: "mid", Namespace: "default", Pod: "mid"}
	alloc, err := f.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr(alloc.IP)
	f.links.links[alloc.HostIfName] = 9
	f.dp.eps[ip] = datapath.EndpointInfo{IfIndex: 9} // programmed, no record
	f2 := restart()
	if adopted, removed, err := f2.m.Restore(); adopted != 3 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d, %d, %v; want 3, 0, nil", adopted, removed, err)
	}
	if _, ok := f2.dp.eps[ip]; ok {
		t.Error("the unrecorded map entry was kept")
	}
	if held, ok := f2.pool.Lookup("mid"); !ok || held != ip {
		t.Fatalf("the ADD in flight lost its IP: %v %v", held, ok)
	}
	if _, err := f2.m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: 9,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"}); err != nil {
		t.Fatalf("register with the new agent: %v", err)
	}
	if f2.dp.eps[ip].IfIndex != 9 {
		t.Errorf("map entry after register: %+v", f2.dp.eps[ip])
	}
}

// A container whose record could not be read kept its map entry and route at
// restore; its DEL, its recorded DEL (made while the agent was unreachable) and a GC
// without it each remove them with the IP and the record, found by the address the
// IPAM pool holds for it. Before, they stayed until the address was reused.
func TestDeleteOfAContainerWithACorruptRecord(t *testing.T) {
	for _, c := range []struct {
		name string
		del  func(t *testing.T, f *fixture, b api.Endpoint)
	}{
		{"DEL", func(t *testing.T, f *fixture, b api.Endpoint) {
			if err := f.m.DeleteOwned("b", b.HostIfIndex); err != nil {
				t.Fatal(err)
			}
		}},
		{"recorded DEL", func(t *testing.T, f *fixture, b api.Endpoint) {
			delete(f.links.links, b.HostIfName) // the plugin deleted the veth without the agent
			rec := api.DeletedEndpoint{ContainerID: "b", HostIfName: b.HostIfName, HostIfIndex: b.HostIfIndex, Deleted: time.Now()}
			if removed, err := f.m.DeleteRecorded(rec); err != nil || !removed {
				t.Fatalf("DeleteRecorded = %v, %v; want true, nil", removed, err)
			}
		}},
		{"GC", func(t *testing.T, f *fixture, _ api.Endpoint) {
			f.m.now = func() time.Time { return time.Now().Add(allocationGrace) } // past the grace of restored allocations
			if removed, err := f.m.GC([]string{"a", "c"}); err != nil || !slices.Equal(removed, []string{"b"}) {
				t.Fatalf("GC = %v, %v; want [b]", removed, err)
			}
		}},
	} {
		for _, format := range []recordFormat{currentFormat} {
			t.Run(c.name+" "+format.name, func(t *testing.T) {
				deleteWithACorruptRecord(t, format, c.name, c.del)
			})
		}
	}
}

// deleteWithACorruptRecord is TestDeleteOfAContainerWithACorruptRecord with b's
// record in format, removed by del (named name).
func deleteWithACorruptRecord(t *testing.T, format recordFormat, name string, del func(t *testing.T, f *fixture, b api.Endpoint)) {
	f, eps, restart := restartFixture(t)
	f.writeRawAs(t, format, "b", []byte(`{"containerID": "b", "ip": "10.2`))
	f2 := restart()
	if _, _, err := f2.m.Restore(); err == nil {
		t.Fatal("Restore over a corrupt record reported nothing")
	}
	bIP := netip.MustParseAddr(eps["b"].IP)
	if _, ok := f2.dp.eps[bIP]; !ok {
		t.Fatal("b's map entry was not kept at restore")
	}
	del(t, f2, eps["b"])
	if info, ok := f2.dp.eps[bIP]; ok {
		t.Errorf("b's map entry after its %s: %+v, want it removed", name, info)
	}
	if idx, ok := f2.links.routes[bIP]; ok {
		t.Errorf("b's route after its %s: via %d, want it removed", name, idx)
	}
	if ip, ok := f2.pool.Lookup("b"); ok {
		t.Errorf("b's IP %v after its %s, want it released", ip, name)
	}
	f.noRecordOf(t, "after b's "+name, "b")
	f2.intact(t, "after b's "+name, eps["a"])
	f2.intact(t, "after b's "+name, eps["c"])
}

// An endpoint Restore could not program again (its attach failed) stays registered
// and counted as not adopted, so its veth is not left with the last agent's programs
// for good: RetryAdoption programs it once the datapath takes it, and removes one
// whose veth went away meanwhile, as Restore does.
func TestRestoreRetriesAFailedAdoption(t *testing.T) {
	dir := t.TempDir()
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	f := newFixture(t, dir, dp, links)
	stuck := f.add(t, "stuck", 10)
	vanishing := f.add(t, "vanishing", 11)
	dp.attached = map[string]int{} // a new agent process knows nothing

	f2 := newFixture(t, dir, dp, links)
	f2.m.dp = failingAttach{dp}
	if adopted, _, err := f2.m.Restore(); adopted != 0 || err == nil || !strings.Contains(err.Error(), "attach failed") {
		t.Fatalf("Restore with failing attaches = %d adopted, %v; want 0 and the attach errors", adopted, err)
	}
	if n := f2.m.Unadopted(); n != 2 {
		t.Fatalf("Unadopted after the failed restore = %d, want 2", n)
	}
	if left, err := f2.m.RetryAdoption(); left != 2 || err == nil {
		t.Errorf("RetryAdoption while attaches still fail = %d left, %v; want 2 and an error", left, err)
	}
	f2.m.dp = dp
	delete(links.links, vanishing.HostIfName)
	if left, err := f2.m.RetryAdoption(); left != 0 || err != nil {
		t.Fatalf("RetryAdoption once attaches work = %d left, %v; want 0, nil", left, err)
	}
	if dp.attached[stuck.HostIfName] != 10 || f.links.routes[netip.MustParseAddr(stuck.IP)] != 10 {
		t.Errorf("after the retry: attached %v routes %v, want %s programmed at index 10", dp.attached, f.links.routes, stuck.HostIfName)
	}
	if _, ok := f2.m.Get("vanishing"); ok {
		t.Error("the endpoint whose veth vanished before the retry is still registered")
	}
	if _, ok := f2.pool.Lookup("vanishing"); ok {
		t.Error("the IP of the endpoint whose veth vanished is still allocated")
	}
}
