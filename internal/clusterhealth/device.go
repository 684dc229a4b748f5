package clusterhealth

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

// DeviceName is the dummy device that carries the node's health address. A dummy
// device, rather than an address on lo, so that it is found and removed by name
// (myelin-agent --cleanup) and shows as myelin's in `ip addr`.
const DeviceName = "myelin_health"

// EnsureDevice makes DeviceName exist, be up and carry exactly addr/32 (an address of
// an earlier PodCIDR is removed). Idempotent.
func EnsureDevice(addr netip.Addr) error {
	l, err := netlink.LinkByName(DeviceName)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return fmt.Errorf("find %s: %w", DeviceName, err)
		}
		if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: DeviceName}}); err != nil {
			return fmt.Errorf("create %s: %w", DeviceName, err)
		}
		if l, err = netlink.LinkByName(DeviceName); err != nil {
			return fmt.Errorf("find %s: %w", DeviceName, err)
		}
	}
	want := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", DeviceName, err)
	}
	for _, a := range addrs {
		if !a.IP.Equal(want.IP) {
			if err := netlink.AddrDel(l, &a); err != nil {
				return fmt.Errorf("remove old health address %s from %s: %w", a.IPNet, DeviceName, err)
			}
		}
	}
	if err := netlink.AddrReplace(l, want); err != nil {
		return fmt.Errorf("add health address %s to %s: %w", addr, DeviceName, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", DeviceName, err)
	}
	return nil
}

// RemoveDevice deletes DeviceName; a device already gone is no error.
func RemoveDevice() error { return link.DeleteByName(DeviceName) }
