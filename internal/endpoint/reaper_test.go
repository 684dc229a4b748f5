package endpoint

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// An ADD of a container id whose previous veth is still retired (same name) deletes
// that veth first; the new attachment is left alone by the reaper afterwards.
func TestReaperReAddWhileRetired(t *testing.T) {
	f := emptyFixture(t)
	old := f.add(t, "a", 7)
	if err := f.m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	f.retired(t, old.HostIfName, 7)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.links.links[old.HostIfName]; ok || len(f.m.Reaper().Pending()) != 0 {
		t.Fatalf("after the re-ADD's allocate: links %v pending %v, want the retired veth deleted", f.links.links, f.m.Reaper().Pending())
	}
	again := f.add(t, "a", 8)
	f.reap(t)
	f.intact(t, "re-added endpoint after the reaper ran", again)
	if f.links.down[8] {
		t.Error("the re-added veth was set down")
	}
}

// A queued veth whose name another link has now (another index) is not deleted.
func TestReaperDeletesOnlyTheRetiredIndex(t *testing.T) {
	f := emptyFixture(t)
	name := HostIfName("x")
	f.links.links[name] = 12
	f.m.reaper.add(name, 7)
	if err := f.m.reaper.finish(name); err != nil {
		t.Fatal(err)
	}
	if f.links.links[name] != 12 {
		t.Errorf("veth %s at index 12 deleted for a retired index 7", name)
	}
}

// A repeated delete keeps one queue entry, and deleting what is gone is no error.
func TestReaperRepeatedDelete(t *testing.T) {
	f := emptyFixture(t)
	ep := f.add(t, "a", 7)
	for i := 0; i < 3; i++ {
		if err := f.m.Delete("a"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if p := f.m.Reaper().Pending(); len(p) != 1 || p[0] != ep.HostIfName {
		t.Errorf("pending %v, want only %s", p, ep.HostIfName)
	}
	delete(f.links.links, ep.HostIfName) // the runtime deleted the pod netns, and the pair with it
	f.reap(t)
}

// A new agent queues the veths its predecessor retired and did not delete: down,
// named like a pod's, with no endpoint. A down veth of an endpoint and an up veth
// with none stay.
func TestRestoreRetiresStrays(t *testing.T) {
	dir := t.TempDir()
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	f := newFixture(t, dir, dp, links)
	kept := f.add(t, "kept", 10)
	links.down[10] = true // set down by someone else: still the endpoint's
	stray, upStray := HostIfName("deleted"), HostIfName("adding")
	links.links[stray], links.links[upStray] = 20, 21
	links.down[20] = true

	f2 := newFixture(t, dir, dp, links)
	if _, _, err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	p := f2.m.Reaper().Pending()
	if len(p) != 1 || !slices.Contains(p, stray) {
		t.Errorf("pending after restore %v, want only %s", p, stray)
	}
	f2.reap(t)
	if _, ok := links.links[stray]; ok || links.links[upStray] != 21 || links.links[kept.HostIfName] != 10 {
		t.Errorf("links after the reaper: %v, want %s gone, %s and %s kept", links.links, stray, upStray, kept.HostIfName)
	}
}

func TestStrays(t *testing.T) {
	eps := map[string]*api.Endpoint{"a": {HostIfName: HostIfName("a"), HostIfIndex: 1}, "b": {HostIfName: HostIfName("b"), HostIfIndex: 2}}
	allocated := map[string]netip.Addr{"a": {}, "b": {}, "adding": {}}
	down := map[string]int{HostIfName("a"): 1, HostIfName("b"): 5, HostIfName("c"): 3, HostIfName("adding"): 4}
	got := strays(down, ownersOf(eps, allocated))
	want := map[string]int{HostIfName("b"): 5, HostIfName("c"): 3}
	if !maps.Equal(got, want) {
		t.Errorf("strays = %v, want %v (b's name on another index than its endpoint's, and c, which no one owns; not adding, an ADD between allocate and register)", got, want)
	}
}
