package endpoint

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/ipam"
)

// smallFixture is a node whose PodCIDR is a /29: 5 pod addresses.
func smallFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	pool, err := ipam.OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix("10.244.7.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	m := NewManager(Config{Dir: filepath.Join(dir, "endpoints"), Node: "n1", MTU: 1500}, dp, links, pool)
	return &fixture{dir, dp, links, pool, m}
}

// An exhausted pool refuses the next ADD with an error naming the node, the pod, the
// PodCIDR, the problem and the fix, and loses nothing; a DEL frees an address for the
// next ADD.
func TestManagerExhaustedPool(t *testing.T) {
	f := smallFixture(t)
	var eps []api.Endpoint
	for i := range 5 {
		eps = append(eps, f.add(t, "ctr-"+string(rune('a'+i)), 10+i))
	}
	_, err := f.m.Allocate(api.PodRef{ContainerID: "one-too-many", Namespace: "web", Pod: "web-0"})
	for _, want := range []string{"no free pod IP on node n1", "web/web-0", "10.244.7.0/29", "all 5 addresses", "delete pods on this node or give it a larger PodCIDR"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ADD on a full pool: %v; want it to say %q", err, want)
		}
	}
	if _, ok := f.pool.Lookup("one-too-many"); ok {
		t.Error("the refused ADD holds an allocation")
	}
	for _, ep := range eps {
		f.intact(t, "after the refused ADD", ep)
	}
	if err := f.m.DeleteOwned(eps[2].ContainerID, eps[2].HostIfIndex); err != nil {
		t.Fatal(err)
	}
	alloc, err := f.m.Allocate(api.PodRef{ContainerID: "one-too-many", Namespace: "web", Pod: "web-0"})
	if err != nil || alloc.IP != eps[2].IP {
		t.Fatalf("ADD after a DEL = %v, %v; want the freed %s", alloc.IP, err, eps[2].IP)
	}
}

// DEL of a container the agent never saw, or saw deleted already, succeeds.
func TestManagerDeleteUnknown(t *testing.T) {
	f := emptyFixture(t)
	for range 2 {
		if err := f.m.DeleteOwned("never-added", 0); err != nil {
			t.Fatalf("DEL of an unknown container: %v", err)
		}
		if err := f.m.DeleteOwned("never-added", 12); err != nil {
			t.Fatalf("DEL of an unknown container naming a veth: %v", err)
		}
	}
}

// A DEL recorded while the agent was down is carried out after the container's IP
// went to another pod (GC released it first): it must not touch that pod, and
// carrying it out again changes nothing.
func TestManagerDeleteRecordedAfterIPReuse(t *testing.T) {
	f := smallFixture(t)
	a := f.add(t, "a", 10)
	delete(f.links.links, a.HostIfName) // DEL without the agent removed the veth
	rec := api.DeletedEndpoint{ContainerID: "a", HostIfName: a.HostIfName, HostIfIndex: 10, Deleted: time.Now()}
	if removed, err := f.m.GC(nil); err != nil || len(removed) != 1 {
		t.Fatalf("GC = %v, %v", removed, err)
	}
	for i := range 4 { // take the other addresses, so b gets a's
		f.add(t, "x"+string(rune('0'+i)), 20+i)
	}
	b := f.add(t, "b", 30)
	if b.IP != a.IP {
		t.Fatalf("b got %s, want a's %s for this test", b.IP, a.IP)
	}
	for range 2 {
		if removed, err := f.m.DeleteRecorded(rec); err != nil || removed {
			t.Fatalf("DeleteRecorded(a) = %v, %v; want false, nil", removed, err)
		}
		f.intact(t, "a's recorded delete", b)
	}
}

// A DEL recorded while the agent was down, carried out while an ADD of the same
// container id that came after it is in flight (allocated, not registered), leaves
// that ADD's allocation: it is a new attachment, not the one DEL removed.
func TestManagerDeleteRecordedLeavesALaterADD(t *testing.T) {
	f := emptyFixture(t)
	clock := time.Now()
	f.m.now = func() time.Time { return clock }
	rec := api.DeletedEndpoint{ContainerID: "a", HostIfName: HostIfName("a"), Deleted: clock.Add(-time.Second)}
	alloc, err := f.m.Allocate(api.PodRef{ContainerID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := f.m.DeleteRecorded(rec); err != nil || removed {
		t.Fatalf("DeleteRecorded = %v, %v; want false, nil", removed, err)
	}
	if ip, ok := f.pool.Lookup("a"); !ok || ip.String() != alloc.IP {
		t.Fatalf("the later ADD's allocation after the recorded delete: %v %v, want %s", ip, ok, alloc.IP)
	}
	// A recorded delete that came after the allocation (the ADD failed and the runtime
	// deleted it while the agent was down) releases it.
	rec.Deleted = clock.Add(time.Second)
	if _, err := f.m.DeleteRecorded(rec); err != nil {
		t.Fatal(err)
	}
	if ip, ok := f.pool.Lookup("a"); ok {
		t.Fatalf("the failed ADD's allocation %v is kept after its recorded delete", ip)
	}
}

// The order of a recorded delete and an allocation is read on CLOCK_BOOTTIME when
// both carry it, whatever the wall clock did in between: a wall clock stepped back
// neither releases the later ADD's allocation nor keeps a failed one's. A record of
// an earlier boot is older than any allocation of this one.
func TestManagerDeleteRecordedOrderByBootClock(t *testing.T) {
	wall := time.Now()
	for _, c := range []struct {
		name    string
		deleted time.Time
		boot    api.BootTime
		kept    bool
	}{
		{"deleted before on the boot clock, after on the wall", wall.Add(time.Hour), api.BootTime{Boot: "b1", Nanos: 50}, true},
		{"deleted after on the boot clock, before on the wall", wall.Add(-time.Hour), api.BootTime{Boot: "b1", Nanos: 150}, false},
		{"deleted in an earlier boot", wall.Add(time.Hour), api.BootTime{Boot: "b0", Nanos: 1 << 60}, true},
		{"an older plugin's record: the wall clock", wall.Add(time.Hour), api.BootTime{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := emptyFixture(t)
			f.m.now = func() time.Time { return wall }
			f.m.bootNow = func() api.BootTime { return api.BootTime{Boot: "b1", Nanos: 100} }
			alloc, err := f.m.Allocate(api.PodRef{ContainerID: "a"})
			if err != nil {
				t.Fatal(err)
			}
			rec := api.DeletedEndpoint{ContainerID: "a", HostIfName: HostIfName("a"), Deleted: c.deleted, DeletedBoot: c.boot}
			if _, err := f.m.DeleteRecorded(rec); err != nil {
				t.Fatal(err)
			}
			if ip, ok := f.pool.Lookup("a"); ok != c.kept || (ok && ip.String() != alloc.IP) {
				t.Errorf("allocation %v %v after the recorded delete; want kept %v", ip, ok, c.kept)
			}
		})
	}
}

// After a restart the allocation of an ADD that died with the old agent, whose DEL
// was recorded while no agent answered, is released by that recorded delete: its
// time is unknown, so it is not taken for a later ADD.
func TestManagerDeleteRecordedReleasesADeadADDAfterRestart(t *testing.T) {
	f, _, restart := restartFixture(t)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "dead"}); err != nil {
		t.Fatal(err)
	}
	rec := api.DeletedEndpoint{ContainerID: "dead", HostIfName: HostIfName("dead"), Deleted: time.Now()}
	f2 := restart()
	f2.m.now = func() time.Time { return rec.Deleted.Add(time.Minute) }
	if _, _, err := f2.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.m.DeleteRecorded(rec); err != nil {
		t.Fatal(err)
	}
	if ip, ok := f2.pool.Lookup("dead"); ok {
		t.Fatalf("the dead ADD's allocation %v is kept after its recorded delete", ip)
	}
}

// A container id is a file name in the agent's state: one that is not a CNI
// container id ("../victim", as a forged request path can carry) is refused before
// it touches a file.
func TestManagerRefusesForgedContainerIDs(t *testing.T) {
	f := emptyFixture(t)
	victim := filepath.Join(f.dir, "victim.json") // what endpoints/../victim.json names
	if err := os.WriteFile(victim, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"../victim", "..", "", "a/b"} {
		if _, err := f.m.Allocate(api.PodRef{ContainerID: id}); err == nil {
			t.Errorf("Allocate(%q) succeeded", id)
		}
		if err := f.m.DeleteOwned(id, 0); err == nil {
			t.Errorf("DeleteOwned(%q) succeeded", id)
		}
		if err := f.m.Release(id, ""); err == nil {
			t.Errorf("Release(%q) succeeded", id)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("a file outside the records directory was touched: %v", err)
	}
	if _, used, _ := f.pool.Usage(); used != 0 {
		t.Errorf("%d IPs allocated to forged ids", used)
	}
}

// The agent records only names and paths (api.CheckPodRef), whoever reaches its
// socket: an ADD whose pod reference holds a newline or is too long holds no IP and
// writes nothing, and no endpoint is registered with one.
func TestManagerRefusesOddPodRefs(t *testing.T) {
	f := smallFixture(t)
	for _, ref := range []api.PodRef{
		{ContainerID: "odd-ns", Namespace: "web\nlevel=ERROR", Pod: "web-0"},
		{ContainerID: "long-pod", Namespace: "web", Pod: strings.Repeat("p", 60<<10)},
		{ContainerID: "odd-netns", Namespace: "web", Pod: "web-0", NetNS: "/run/netns/x\x00y"},
	} {
		if _, err := f.m.Allocate(ref); err == nil {
			t.Errorf("Allocate(%.60q) succeeded", ref)
		}
		if _, ok := f.pool.Lookup(ref.ContainerID); ok {
			t.Errorf("refused ADD %s holds an IP", ref.ContainerID)
		}
	}
	good := api.PodRef{ContainerID: "ok", Namespace: "web", Pod: "web-0"}
	alloc, err := f.m.Allocate(good)
	if err != nil {
		t.Fatal(err)
	}
	f.links.links[alloc.HostIfName] = 9
	bad := good
	bad.Pod = "web-0\n"
	_, err = f.m.Put(api.Endpoint{PodRef: bad, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: 9,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"})
	if err == nil || !strings.Contains(err.Error(), "pod name") {
		t.Errorf("Put with a pod name holding a newline: %v; want it refused naming the pod name", err)
	}
	if _, ok := f.m.Get("ok"); ok {
		t.Error("the refused endpoint is registered")
	}
}
