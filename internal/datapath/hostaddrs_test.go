package datapath

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// SetHostAddresses replaces the map's addresses (IPv4 only, duplicates once);
// more than fit are written in part with an error that says so.
func TestPrivilegedHostAddresses(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	check := func(step string, want []netip.Addr) {
		t.Helper()
		got, err := d.HostAddresses()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !slices.Equal(got, want) {
			if len(got) > 10 || len(want) > 10 {
				t.Errorf("%s: the map holds %d addresses, want %d (the first %d of the set, sorted)", step, len(got), len(want), len(want))
				return
			}
			t.Errorf("%s: the map holds %v, want %v", step, got, want)
		}
	}
	if err := d.SetHostAddresses(addrs("192.168.0.11", "192.0.2.77", "fd00::1", "192.0.2.77", "::ffff:10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	check("first set", addrs("10.0.0.5", "192.0.2.77", "192.168.0.11"))
	if err := d.SetHostAddresses(addrs("192.168.0.11", "198.51.100.1")); err != nil {
		t.Fatal(err)
	}
	check("an address gone, one added", addrs("192.168.0.11", "198.51.100.1"))

	var many []netip.Addr
	for i := range HostAddressesMax + 3 {
		many = append(many, netip.MustParseAddr(fmt.Sprintf("10.1.%d.%d", i/256, i%256)))
	}
	err := d.SetHostAddresses(many)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d IPv4 addresses", HostAddressesMax+3)) ||
		!strings.Contains(err.Error(), "other 3") {
		t.Errorf("%d addresses: error %v, want one that says 3 of them did not fit", len(many), err)
	}
	check("over the map's size", many[:HostAddressesMax])
	if err := d.SetHostAddresses(nil); err != nil {
		t.Fatal(err)
	}
	check("none", nil)
}
