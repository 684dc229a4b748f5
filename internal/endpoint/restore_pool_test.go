package endpoint

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// Restores over a damaged or lost IPAM state (ipam.json): the records claim their
// addresses back; an unreadable record's container by its veth's map entry.

// With the IPAM state lost (moved away after it was corrupt) the records claim
// their addresses back: no new pod gets a live pod's address.
func TestRestoreClaimsAddressesBackIntoALostPool(t *testing.T) {
	f, eps, restart := restartFixture(t)
	if err := os.Remove(filepath.Join(f.dir, "ipam.json")); err != nil {
		t.Fatal(err)
	}
	f2 := restart()
	if adopted, removed, err := f2.m.Restore(); adopted != 3 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 3, 0, nil", adopted, removed, err)
	}
	live := map[string]bool{}
	for _, ep := range eps {
		live[ep.IP] = true
	}
	for i := range 5 {
		alloc, err := f2.m.Allocate(api.PodRef{ContainerID: "new" + string(rune('0'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if live[alloc.IP] {
			t.Fatalf("a new pod got the live address %s", alloc.IP)
		}
	}
}

// A truncated ipam.json (a power loss before it was synced) is moved aside; the
// records claim their addresses back, every endpoint is adopted, and no new pod gets
// a live pod's address.
func TestRestoreOverATruncatedPoolFile(t *testing.T) {
	f, eps, restart := restartFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "ipam.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f2 := restart()
	if f2.pool.Damaged() == nil {
		t.Error("the pool does not say its file was damaged")
	}
	if adopted, removed, err := f2.m.Restore(); adopted != 3 || removed != 0 || err != nil {
		t.Fatalf("Restore = %d adopted, %d removed, %v; want 3, 0, nil", adopted, removed, err)
	}
	for id, ep := range eps {
		if ip, ok := f2.pool.Lookup(id); !ok || ip.String() != ep.IP {
			t.Errorf("%s holds %v %v after restore, want %s", id, ip, ok, ep.IP)
		}
	}
	alloc, err := f2.m.Allocate(api.PodRef{ContainerID: "new"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if alloc.IP == ep.IP {
			t.Fatalf("a new pod got the live address %s", alloc.IP)
		}
	}
}

// restartWithPoolAndRecordDamaged is restartFixture's restart (not restored yet)
// after ipam.json was truncated and b's record too; vethGone: b's veth with them.
func restartWithPoolAndRecordDamaged(t *testing.T, vethGone bool) (map[string]api.Endpoint, *fixture) {
	t.Helper()
	f, eps, restart := restartFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "ipam.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.writeRaw(t, "b", []byte(`{"containerID": "b", "ip": "10.2`))
	if vethGone {
		delete(f.links.links, eps["b"].HostIfName)
	}
	return eps, restart()
}

// ipam.json and a record both damaged: the container of the unreadable record gets
// its address back from the map entry on its live veth, so the entry is no stray and
// no new pod is given the address while the pod still runs on it.
func TestRestoreOverATruncatedPoolFileAndRecord(t *testing.T) {
	eps, f2 := restartWithPoolAndRecordDamaged(t, false)
	if adopted, _, err := f2.m.Restore(); adopted != 2 || err == nil {
		t.Fatalf("Restore = %d adopted, %v; want 2 and an error naming b's record", adopted, err)
	}
	bIP := netip.MustParseAddr(eps["b"].IP)
	if ip, ok := f2.pool.Lookup("b"); !ok || ip != bIP {
		t.Fatalf("b's IP after restore: %v %v, want %v claimed back", ip, ok, bIP)
	}
	if f2.dp.eps[bIP].IfIndex != eps["b"].HostIfIndex {
		t.Errorf("b's map entry after restore: %+v, want it kept", f2.dp.eps[bIP])
	}
	for _, id := range []string{"new-1", "new-2", "new-3"} {
		alloc, err := f2.m.Allocate(api.PodRef{ContainerID: id})
		if err != nil {
			t.Fatal(err)
		}
		if alloc.IP == eps["b"].IP {
			t.Fatalf("a new pod got b's live address %s", alloc.IP)
		}
	}
}

// A container whose record can't be read and whose address the pool lost with no
// veth left to claim it back by gets a new address from its next ADD; that address is
// the ADD's (and a retry's in flight beside it), so their failure releases it; only
// the address the pod holds is kept.
func TestUnreadableRecordsNewAddressIsTheADDs(t *testing.T) {
	_, f2 := restartWithPoolAndRecordDamaged(t, true)
	if _, _, err := f2.m.Restore(); err == nil {
		t.Fatal("Restore without an error for b's record")
	}
	if ip, ok := f2.pool.Lookup("b"); ok {
		t.Fatalf("b holds %v after restore, want nothing to claim it by", ip)
	}
	ref := api.PodRef{ContainerID: "b", Namespace: "default", Pod: "b"}
	again, err1 := f2.m.Allocate(ref)
	retry, err2 := f2.m.Allocate(ref) // the runtime retried before the first answered
	if err1 != nil || err2 != nil || retry.IP != again.IP {
		t.Fatalf("two ADDs of b: %+v %v, %+v %v; want one new address", again, err1, retry, err2)
	}
	if err := f2.m.Release("b", again.Attempt); err != nil {
		t.Fatalf("release of the first failed ADD of b's new address %s: %v", again.IP, err)
	}
	if ip, ok := f2.pool.Lookup("b"); !ok || ip.String() != again.IP {
		t.Fatalf("b's new address after the first ADD's release: %v %v, want %s kept for the retry in flight", ip, ok, again.IP)
	}
	if err := f2.m.Release("b", retry.Attempt); err != nil {
		t.Fatalf("release of the retry's failed ADD: %v", err)
	}
	if ip, ok := f2.pool.Lookup("b"); ok {
		t.Errorf("b's new address %v is still allocated after both ADDs' releases", ip)
	}
}
