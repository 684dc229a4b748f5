package flowstore

import (
	"net/netip"
	"testing"
)

// TestAddrNames: cached names are the addresses' strings, and the cache starts over
// at its bound instead of growing.
func TestAddrNames(t *testing.T) {
	var n addrNames
	a := netip.MustParseAddr("10.244.1.5")
	if got := n.name(a); got != "10.244.1.5" || n.name(a) != got {
		t.Fatalf("name %q", got)
	}
	base := netip.MustParseAddr("10.0.0.0").As4()
	for i := range addrNamesMax + 5 {
		b := base
		b[2], b[3] = byte(i>>8), byte(i)
		ip := netip.AddrFrom4(b)
		if got := n.name(ip); got != ip.String() {
			t.Fatalf("name of %v: %q", ip, got)
		}
	}
	if len(n) > addrNamesMax {
		t.Errorf("cache holds %d names, bound %d", len(n), addrNamesMax)
	}
	var none *addrNames
	if got := none.name(a); got != "10.244.1.5" {
		t.Errorf("nil cache: %q", got)
	}
}
