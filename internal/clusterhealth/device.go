package clusterhealth

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AddressLabel marks the node's health address on lo ("lo:" + a name, at most 15
// characters), so that it is found and removed by its label (myelin-agent --cleanup)
// and shows as myelin's in `ip addr`. lo rather than a dummy device: lo exists on
// every node, and some kernels are built without dummy devices (CONFIG_DUMMY).
const AddressLabel = "lo:myelinhealth"

// EnsureAddress makes lo carry addr/32 labelled AddressLabel, and no other address
// with that label (an earlier PodCIDR's is removed). Idempotent.
func EnsureAddress(addr netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := removeLabelled(lo, addr); err != nil {
		return err
	}
	// Scope host: the kernel never picks it as the source of the node's own traffic
	// (with scope global on lo it became the source of every host-to-pod packet, and
	// kubelet probes left from a pod address); the prober binds to it explicitly, and
	// packets to it are still delivered locally.
	want := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}, Label: AddressLabel,
		Scope: unix.RT_SCOPE_HOST}
	if err := netlink.AddrReplace(lo, want); err != nil {
		return fmt.Errorf("add health address %s to lo: %w", addr, err)
	}
	return nil
}

// RemoveAddress deletes the health address from lo; none there is no error.
func RemoveAddress() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	return removeLabelled(lo, netip.Addr{})
}

// removeLabelled deletes lo's addresses labelled AddressLabel other than keep.
func removeLabelled(lo netlink.Link, keep netip.Addr) error {
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of lo: %w", err)
	}
	for _, a := range addrs {
		if a.Label != AddressLabel || (keep.IsValid() && a.IP.Equal(keep.AsSlice())) {
			continue
		}
		if err := netlink.AddrDel(lo, &a); err != nil {
			return fmt.Errorf("remove health address %s from lo: %w", a.IPNet, err)
		}
	}
	return nil
}
