package datapath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// A pinned map whose size changed (here policy-ct-max) is replaced, and Load says
// which one and why: the agent logs it, with the entries it carried over.
func TestPrivilegedLoadReportsReplacedMaps(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)

	for _, c := range []struct {
		ctMax  uint32
		want   string // "" no replacement
		reason string
	}{
		{ctMax: 2048},
		{ctMax: 2048},
		{ctMax: 4096, want: "myelin_policy_ct", reason: "MaxEntries: 513 changed to 1025"}, // buckets of 4 and the header
	} {
		d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF, PolicyCTMax: c.ctMax})
		if err != nil {
			t.Fatalf("load with PolicyCTMax %d: %v", c.ctMax, err)
		}
		got := d.ReplacedMaps()
		d.Close()
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("PolicyCTMax %d: replaced %+v, want none", c.ctMax, got)
		case c.want != "" && (len(got) != 1 || got[0].Name != c.want || !strings.Contains(got[0].Reason, c.reason)):
			t.Errorf("PolicyCTMax %d: replaced %+v, want only %s (%s)", c.ctMax, got, c.want, c.reason)
		}
	}
}

// A map an older build pinned and this one no longer declares is unpinned by Load:
// nothing else would ever remove it, and it holds kernel memory until the node reboots.
func TestPrivilegedLoadRemovesDroppedMapPins(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "myelin_dropped", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	dropped := filepath.Join(dir, "myelin_dropped")
	if err := old.Pin(dropped); err != nil {
		t.Fatal(err)
	}

	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := os.Stat(dropped); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin of a map this build dropped after Load: stat err = %v, want not exist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "myelin_endpoints")); err != nil {
		t.Errorf("pin of a map this build declares: %v", err)
	}
}

// Shrinking the endpoints map below the endpoints it holds fails Load naming the
// map and leaves the pinned map as it was: a later Load with room still has every
// endpoint (before, the failed Load had already replaced the pin with a map
// holding only those that fit, and the rest were lost for good).
func TestPrivilegedLoadShrinkBelowEndpointsKeepsPin(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	pinSeeded(t, dir)

	_, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF, EndpointsMax: 1})
	if err == nil || !strings.Contains(err.Error(), "myelin_endpoints") {
		t.Fatalf("load with EndpointsMax 1 below 2 endpoints: err = %v, want an error naming myelin_endpoints", err)
	}

	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	eps, err := d.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != len(seedAB) {
		t.Errorf("endpoints after the refused shrink and a reload = %v, want the %d seeded", eps, len(seedAB))
	}
}

// A Load that fails (here: a NAT table too large to create) after finding pinned
// maps that no longer match leaves every pin as it was: the programs still attached
// keep using those maps, and a later Load adopts them with their entries (before,
// they were unpinned first, so the failed Load lost the endpoints it meant to carry
// and the state of every other mismatched map).
func TestPrivilegedLoadFailureKeepsPins(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	pinSeeded(t, dir)

	if _, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF, EndpointsMax: 2048, NATMax: 1 << 31}); err == nil {
		t.Fatal("load with a NAT table of 2^31 entries: no error")
	}

	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.ReplacedMaps(); len(got) != 0 {
		t.Errorf("reload with the first configuration replaced %+v, want none: the failed Load changed the pins", got)
	}
	eps, err := d.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != len(seedAB) {
		t.Errorf("endpoints after a failed Load and a reload = %v, want the %d seeded", eps, len(seedAB))
	}
}

// pinSeeded loads the datapath into dir, pinning its maps with the endpoints of
// seedAB, and closes it (the pins stay).
func pinSeeded(t *testing.T, dir string) {
	t.Helper()
	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// A pinned map whose entries changed layout (an upgrade: here a myelin_policy_ct
// with another value size) is replaced by an empty one: its entries would mean
// something else in the new programs, so none is carried, and Load says so.
func TestPrivilegedLoadDoesNotCarryChangedLayout(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDirReady(t)
	defer Unpin(dir)
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "myelin_policy_ct", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 8, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	d := loadOverPinned(t, dir, "myelin_policy_ct", old, make([]byte, 16), make([]byte, 8))
	defer d.Close()
	r := d.ReplacedMaps()
	if len(r) != 1 || r[0].Name != "myelin_policy_ct" || r[0].Carrying() || r[0].Carried != 0 {
		t.Errorf("load over a myelin_policy_ct of another value size: replaced %+v, want it replaced, nothing carried", r)
	}
	if n := len(policyCTEntries(d)); n != 0 {
		t.Errorf("replacement of a changed layout: %d entries, want an empty table", n)
	}
}

// loadOverPinned puts key and value into old, pins it in dir as name, and loads the
// datapath over it.
func loadOverPinned(t *testing.T, dir, name string, old *ebpf.Map, key, value any) *Datapath {
	t.Helper()
	if err := old.Update(key, value, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if err := old.Pin(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
