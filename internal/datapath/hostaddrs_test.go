package datapath

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// SetHostAddresses replaces the map's addresses (IPv4 but loopback, each
// once); more than fit are written in part, the first ones given, with an
// error that says so; a full map takes an entirely new set.
func TestPrivilegedHostAddresses(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if got := d.objs.MyelinHostAddrs.MaxEntries(); got != HostAddressesMax {
		t.Fatalf("myelin_host_addrs holds %d, HostAddressesMax says %d", got, HostAddressesMax)
	}
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, mustAddr(a))
		}
		return out
	}
	check := func(step string, want []netip.Addr) {
		t.Helper()
		got, err := d.HostAddresses()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want = slices.Clone(want)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			if len(got) > 10 || len(want) > 10 {
				t.Errorf("%s: the map holds %d addresses, want %d", step, len(got), len(want))
				return
			}
			t.Errorf("%s: the map holds %v, want %v", step, got, want)
		}
	}
	if err := d.SetHostAddresses(addrs("192.168.0.11", "192.0.2.77", "fd00::1", "192.0.2.77", "::ffff:10.0.0.5", "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	check("first set", addrs("10.0.0.5", "192.0.2.77", "192.168.0.11"))
	if err := d.SetHostAddresses(addrs("192.168.0.11", "198.51.100.1")); err != nil {
		t.Fatal(err)
	}
	check("an address gone, one added", addrs("192.168.0.11", "198.51.100.1"))

	// The address that matters first, then more than fit.
	numbered := func(b byte, n int) []netip.Addr {
		out := make([]netip.Addr, 0, n)
		for i := range n {
			out = append(out, netip.AddrFrom4([4]byte{10, b, byte(i / 256), byte(i % 256)}))
		}
		return out
	}
	many := append(addrs("198.51.100.1"), numbered(1, HostAddressesMax+2)...)
	err := d.SetHostAddresses(many)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d IPv4 addresses", HostAddressesMax+3)) ||
		!strings.Contains(err.Error(), "other 3") {
		t.Errorf("%d addresses: error %v, want one that says 3 of them did not fit", len(many), err)
	}
	check("over the map's size: the first ones", many[:HostAddressesMax])
	other := numbered(2, HostAddressesMax)
	if err := d.SetHostAddresses(other); err != nil {
		t.Fatal(err)
	}
	check("a full map replaced by another full set", other)
	if err := d.SetHostAddresses(nil); err != nil {
		t.Fatal(err)
	}
	check("none", nil)
}
