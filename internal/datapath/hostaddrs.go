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
const HostAddressesMax = 16384

// SetHostAddresses replaces the node's own addresses in myelin_host_addrs
// with addrs: what the host's stack sends into a pod from one of them is the
// node's own traffic, which NetworkPolicy lets into isolated pods (kubelet
// probes; the node IP is exempt without an entry). IPv6 and loopback (127/8)
// addresses are left out. Stale entries go first (they are no longer the
// node's, and they make room), then the missing ones are added; addresses in
// both sets stay throughout. addrs come in order of preference: past
// HostAddressesMax the first ones are written and the error says how many
// were left out (the host's traffic from those is judged like any peer's).
func (d *Datapath) SetHostAddresses(addrs []netip.Addr) error {
	want := make([]netip.Addr, 0, len(addrs))
	keep := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() || a.IsLoopback() || keep[a] {
			continue
		}
		keep[a] = true
		want = append(want, a)
	}
	var over error
	if len(want) > HostAddressesMax {
		over = fmt.Errorf("set host addresses: the node has %d IPv4 addresses, myelin_host_addrs holds %d: "+
			"the host's traffic into isolated pods from the other %d (from %v on) is judged like any peer's; remove addresses from the node",
			len(want), HostAddressesMax, len(want)-HostAddressesMax, want[HostAddressesMax])
		for _, a := range want[HostAddressesMax:] {
			delete(keep, a)
		}
		want = want[:HostAddressesMax]
	}
	have, err := d.HostAddresses()
	if err != nil {
		return err
	}
	m := d.objs.MyelinHostAddrs
	for _, a := range have {
		if keep[a] {
			continue
		}
		if err := m.Delete(networkUint32(a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove host address %v: %w", a, err)
		}
	}
	for _, a := range want {
		if _, held := slices.BinarySearchFunc(have, a, netip.Addr.Compare); held {
			continue
		}
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
	return slices.Compact(out), nil // an iteration beside a sync may see a key twice
}
