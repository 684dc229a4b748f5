package ipam

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestAllocatorExhaustsAndReuses(t *testing.T) {
	a, err := NewAllocator(netip.MustParsePrefix("10.0.0.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Total() != 5 {
		t.Fatalf("Total = %d, want 5 (8 minus network, node and broadcast)", a.Total())
	}
	got := map[netip.Addr]bool{}
	for i := range 5 {
		ip, err := a.Allocate(string(rune('a'+i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ip.String() == "10.0.0.0" || ip.String() == "10.0.0.1" || ip.String() == "10.0.0.7" || got[ip] {
			t.Fatalf("allocated %v (reserved or duplicate)", ip)
		}
		got[ip] = true
	}
	if again, _ := a.Allocate("a", nil); again.String() != "10.0.0.2" {
		t.Errorf("re-allocating for the same owner gave %v, want its address 10.0.0.2", again)
	}
	if _, err := a.Allocate("z", nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocation past the end: %v, want ErrExhausted", err)
	}
	ip, ok := a.Release("c")
	if !ok || ip.String() != "10.0.0.4" {
		t.Fatalf("Release(c) = %v %v", ip, ok)
	}
	if _, ok := a.Release("c"); ok {
		t.Error("second release reported an address")
	}
	if ip, err := a.Allocate("z", nil); err != nil || ip.String() != "10.0.0.4" {
		t.Errorf("allocation after release = %v %v, want the freed 10.0.0.4", ip, err)
	}
}

func TestPoolPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	cidr := netip.MustParsePrefix("10.244.1.0/24")
	p, err := OpenPool(path, cidr)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Allocate("ctr-a", nil)
	b, _ := p.Allocate("ctr-b", nil)
	if err := p.Release("ctr-a"); err != nil {
		t.Fatal(err)
	}
	p2, err := OpenPool(path, cidr)
	if err != nil {
		t.Fatal(err)
	}
	if ip, ok := p2.Lookup("ctr-b"); !ok || ip != b {
		t.Errorf("reopened pool: ctr-b = %v %v, want %v", ip, ok, b)
	}
	if _, ok := p2.Lookup("ctr-a"); ok {
		t.Errorf("reopened pool still has released ctr-a (%v)", a)
	}
	if _, used, total := p2.Usage(); used != 1 || total != 253 {
		t.Errorf("usage %d/%d, want 1/253", used, total)
	}
	if _, err := OpenPool(path, netip.MustParsePrefix("10.244.2.0/24")); err == nil {
		t.Error("opening the pool with another PodCIDR succeeded")
	}
}

// The scan position survives a restart: an address released just before it is not
// the first one handed out after it (peers may still hold connection, conntrack and
// policy state for the deleted pod that had it).
func TestPoolKeepsItsScanPositionAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	cidr := netip.MustParsePrefix("10.244.1.0/29")
	p, err := OpenPool(path, cidr)
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"a", "b", "c"} { // .2, .3, .4
		if _, err := p.Allocate(owner, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release("b"); err != nil { // .3 free, the scan at .5
		t.Fatal(err)
	}
	p, err = OpenPool(path, cidr) // the agent restarted
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, owner := range []string{"d", "e", "f"} {
		ip, err := p.Allocate(owner, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip.String())
	}
	if want := []string{"10.244.1.5", "10.244.1.6", "10.244.1.3"}; !slices.Equal(got, want) {
		t.Errorf("allocations after the restart: %v, want %v (the released .3 last)", got, want)
	}
}

// A pool file without a scan position (written before it was kept) loads whole and
// scans from the start; one with a position outside the range loads too, says so,
// and scans from the start.
func TestOpenPoolReadsFilesWithoutAScanPosition(t *testing.T) {
	cidr := netip.MustParsePrefix("10.244.1.0/29")
	for _, c := range []struct {
		name, next string
		damaged    bool
	}{
		{"no position", "", false},
		{"position outside the range", `,"next":"10.244.1.7"`, true},
		{"position not an address", `,"next":"ten"`, true},
	} {
		path := filepath.Join(t.TempDir(), "ipam.json")
		file := `{"cidr":"10.244.1.0/29","allocations":{"a":"10.244.1.4"}` + c.next + `}`
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := OpenPool(path, cidr)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d := p.Damaged(); (d != nil) != c.damaged || c.damaged && !strings.Contains(d.Error(), "scan") {
			t.Errorf("%s: Damaged() = %v, want damaged %v naming the scan position", c.name, d, c.damaged)
		}
		if ip, ok := p.Lookup("a"); !ok || ip.String() != "10.244.1.4" {
			t.Errorf("%s: a = %v %v, want 10.244.1.4", c.name, ip, ok)
		}
		if ip, err := p.Allocate("b", nil); err != nil || ip.String() != "10.244.1.2" {
			t.Errorf("%s: first allocation %v %v, want the range's first 10.244.1.2", c.name, ip, err)
		}
	}
}

// An allocation whose owner is not a CNI container id (a written "../x": the endpoint
// manager removes "<owner>.json" at GC and DEL) is left out of a pool read back and
// reported as damage; the other allocations stay.
func TestOpenPoolLeavesOutOwnersThatAreNoContainerID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	file := `{"cidr":"10.244.1.0/29","allocations":{"a":"10.244.1.4","../../victim":"10.244.1.5"}}`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPool(path, netip.MustParsePrefix("10.244.1.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Damaged(); d == nil || !strings.Contains(d.Error(), "victim") {
		t.Errorf("Damaged() = %v, want the forged owner named", d)
	}
	if _, ok := p.Lookup("../../victim"); ok || len(p.Owners()) != 1 {
		t.Errorf("owners after reading %s: %v, want only a", file, p.Owners())
	}
}

// A pool whose only free address is claimed refuses a new owner, naming the range and
// why, without losing its state; the owner whose Pod claims it (a retried ADD) keeps
// it; once the claim is gone the address is handed out, and the round-robin goes on
// from there.
func TestPoolPassesOverClaimedAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	cidr := netip.MustParsePrefix("10.244.1.0/29") // .2 to .6
	p, err := OpenPool(path, cidr)
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"a", "b", "c", "d"} { // .2 to .5
		if _, err := p.Allocate(owner, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release("b"); err != nil { // .3 free, the scan at .6
		t.Fatal(err)
	}
	terminating := map[netip.Addr]bool{netip.MustParseAddr("10.244.1.3"): true, netip.MustParseAddr("10.244.1.6"): true}
	claimed := func(ip netip.Addr) bool { return terminating[ip] }
	_, err = p.Allocate("e", claimed)
	if !errors.Is(err, ErrClaimed) || !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocation with every free address claimed: %v, want ErrClaimed and ErrExhausted", err)
	}
	for _, want := range []string{"10.244.1.0/29", "3 of the 5", "2 more", "being deleted", "retry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, ok := p.Lookup("e"); ok {
		t.Error("a refused allocation is kept")
	}
	if ip, err := p.Allocate("a", claimed); err != nil || ip.String() != "10.244.1.2" {
		t.Errorf("a's retried allocation = %v %v, want its 10.244.1.2", ip, err)
	}
	delete(terminating, netip.MustParseAddr("10.244.1.3")) // that Pod is gone
	if ip, err := p.Allocate("e", claimed); err != nil || ip.String() != "10.244.1.3" {
		t.Fatalf("allocation once .3's Pod is gone = %v %v, want 10.244.1.3", ip, err)
	}
	if err := p.Release("c"); err != nil { // .4 free, the scan at .4
		t.Fatal(err)
	}
	delete(terminating, netip.MustParseAddr("10.244.1.6"))
	if ip, err := p.Allocate("f", claimed); err != nil || ip.String() != "10.244.1.4" {
		t.Errorf("next allocation = %v %v, want 10.244.1.4 (the scan goes on after .3)", ip, err)
	}
}
