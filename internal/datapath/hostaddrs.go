package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// HostAddressesMax is the size of myelin_host_addrs (HOST_ADDRS_MAX in
// bpf/lib/maps.h).
const HostAddressesMax = 1024

// SetHostAddresses replaces the node's own addresses in myelin_host_addrs
// with addrs (IPv4; others are left out): what the host's stack sends into a
// pod from one of them is the node's own traffic, which NetworkPolicy lets
// into isolated pods (kubelet probes; the node IP is exempt without an
// entry). Stale addresses go out first (they are no longer the node's, and
// they make room); those in both sets stay throughout. More than
// HostAddressesMax fit only in part: the first ones (sorted) are written and
// the error says how many were left out, whose traffic isolated pods judge as
// any other peer's.
func (d *Datapath) SetHostAddresses(addrs []netip.Addr) error {
	want := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			want = append(want, a)
		}
	}
	slices.SortFunc(want, netip.Addr.Compare)
	want = slices.Compact(want)
	var over error
	if len(want) > HostAddressesMax {
		over = fmt.Errorf("set host addresses: the node has %d IPv4 addresses, myelin_host_addrs holds %d: "+
			"the host's traffic from the other %d (from %v) is judged by NetworkPolicy like any peer's; remove addresses from the node",
			len(want), HostAddressesMax, len(want)-HostAddressesMax, want[HostAddressesMax])
		want = want[:HostAddressesMax]
	}
	m := d.objs.MyelinHostAddrs
	keep := make(map[uint32]bool, len(want))
	for _, a := range want {
		keep[networkUint32(a)] = true
	}
	var (
		k     uint32
		v     uint8
		stale []uint32
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !keep[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list host addresses: %w", err)
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove host address %v: %w", addrFromNetwork(k), err)
		}
	}
	for _, a := range want {
		if err := m.Update(networkUint32(a), uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("add host address %v: %w", a, err)
		}
	}
	return over
}

// HostAddresses returns the addresses in myelin_host_addrs, sorted.
func (d *Datapath) HostAddresses() ([]netip.Addr, error) {
	var (
		k   uint32
		v   uint8
		out []netip.Addr
	)
	it := d.objs.MyelinHostAddrs.Iterate()
	for it.Next(&k, &v) {
		out = append(out, addrFromNetwork(k))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list host addresses: %w", err)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
