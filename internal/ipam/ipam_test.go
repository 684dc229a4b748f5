package ipam

import (
	"errors"
	"net/netip"
	"path/filepath"
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
		ip, err := a.Allocate(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		if ip.String() == "10.0.0.0" || ip.String() == "10.0.0.1" || ip.String() == "10.0.0.7" || got[ip] {
			t.Fatalf("allocated %v (reserved or duplicate)", ip)
		}
		got[ip] = true
	}
	if again, _ := a.Allocate("a"); again.String() != "10.0.0.2" {
		t.Errorf("re-allocating for the same owner gave %v, want its address 10.0.0.2", again)
	}
	if _, err := a.Allocate("z"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("allocation past the end: %v, want ErrExhausted", err)
	}
	ip, ok := a.Release("c")
	if !ok || ip.String() != "10.0.0.4" {
		t.Fatalf("Release(c) = %v %v", ip, ok)
	}
	if _, ok := a.Release("c"); ok {
		t.Error("second release reported an address")
	}
	if ip, err := a.Allocate("z"); err != nil || ip.String() != "10.0.0.4" {
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
	a, _ := p.Allocate("ctr-a")
	b, _ := p.Allocate("ctr-b")
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
