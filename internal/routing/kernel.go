package routing

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/link"
)

// Route protocols marking myelin's routes (values from the unassigned range of
// rtnetlink's RTPROT_*), so reconciliation only ever touches its own.
const (
	ProtoPod  netlink.RouteProtocol = 201
	ProtoNode netlink.RouteProtocol = 202
)

// Kernel applies routes and link operations in the current network namespace.
type Kernel struct{}

var _ endpoint.Links = Kernel{}

func hostRoute(ip netip.Addr) *net.IPNet {
	return &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

// IfIndex returns a link's index (an error wrapping endpoint.ErrLinkNotFound if absent).
func (Kernel) IfIndex(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return 0, fmt.Errorf("%s: %w", name, endpoint.ErrLinkNotFound)
		}
		return 0, err
	}
	return l.Attrs().Index, nil
}

// SetLinkDown sets the link at index down; a link that is gone is fine.
func (Kernel) SetLinkDown(index int) error {
	err := netlink.LinkSetDown(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index}})
	if errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

// DeleteLinkAt deletes the link at index if it is still named name (link.DeleteAt).
func (Kernel) DeleteLinkAt(index int, name string) error { return link.DeleteAt(index, name) }

// DownPodVeths returns the veths named like a pod's host side that are down.
func (Kernel) DownPodVeths() (map[string]int, error) {
	links, err := link.Dump("links", netlink.LinkList)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range links {
		a := l.Attrs()
		if l.Type() == "veth" && api.IsHostIfName(a.Name) && a.Flags&net.FlagUp == 0 {
			out[a.Name] = a.Index
		}
	}
	return out, nil
}

// ReplacePodRoute routes ip/32 to the pod's host-side veth.
func (Kernel) ReplacePodRoute(ip netip.Addr, ifindex int) error {
	return netlink.RouteReplace(&netlink.Route{
		LinkIndex: ifindex, Dst: hostRoute(ip), Scope: netlink.SCOPE_LINK, Protocol: ProtoPod,
	})
}

// DeletePodRoute removes ip/32 if myelin installed it.
func (Kernel) DeletePodRoute(ip netip.Addr) error {
	routes, err := link.Dump("pod routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Dst: hostRoute(ip), Protocol: ProtoPod},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return err
	}
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// ConnectedPrefixes lists the IPv4 subnets directly on the link named name (its
// addresses' networks).
func ConnectedPrefixes(name string) ([]netip.Prefix, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("uplink %s: %w", name, err)
	}
	addrs, err := link.Dump("addresses", func() ([]netlink.Addr, error) { return netlink.AddrList(l, unix.AF_INET) })
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones).Masked())
	}
	return out, nil
}

// SyncNodeRoutes makes myelin's node routes exactly want: replaces each and removes
// any other route carrying ProtoNode.
func (Kernel) SyncNodeRoutes(want []NodeRoute) error {
	have, err := link.Dump("node routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: ProtoNode}, netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return fmt.Errorf("list node routes: %w", err)
	}
	wanted := map[string]bool{}
	var errs []error
	for _, r := range want {
		wanted[r.Dst.String()] = true
		err := netlink.RouteReplace(&netlink.Route{
			Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), 32)},
			Gw:       r.Via.AsSlice(),
			Protocol: ProtoNode,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("route %v via %v (node %s): %w", r.Dst, r.Via, r.Node, err))
		}
	}
	for _, r := range have {
		if r.Dst != nil && !wanted[r.Dst.String()] {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("remove route %v: %w", r.Dst, err))
			}
		}
	}
	return errors.Join(errs...)
}

// PodRoutes counts the pod routes myelin has installed.
func PodRoutes() int {
	rs, _ := link.Dump("pod routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: ProtoPod}, netlink.RT_FILTER_PROTOCOL)
	})
	return len(rs)
}
