package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/myelin-net/myelin/internal/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ProtoTunnel marks myelin's tunnel routes (next to routing.ProtoPod/ProtoNode).
const ProtoTunnel netlink.RouteProtocol = 203

// lwtunnelIPDst is LWTUNNEL_IP_DST of the kernel's lwtunnel "ip" encapsulation.
const lwtunnelIPDst = 2

// ipEncap is the lightweight-tunnel metadata "encap ip dst X" that a route hands to a
// collect-metadata tunnel device (netlink has no type for it).
type ipEncap struct{ dst net.IP }

func (e *ipEncap) Type() int { return nl.LWTUNNEL_ENCAP_IP }

func (e *ipEncap) Encode() ([]byte, error) {
	ip := e.dst.To4()
	if ip == nil {
		return nil, fmt.Errorf("encap destination %v is not IPv4", e.dst)
	}
	b := make([]byte, 8)
	binary.NativeEndian.PutUint16(b, 8)
	binary.NativeEndian.PutUint16(b[2:], lwtunnelIPDst)
	copy(b[4:], ip)
	return b, nil
}

func (e *ipEncap) Decode(b []byte) error {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			return errors.New("bad lwtunnel attribute")
		}
		if binary.NativeEndian.Uint16(b[2:]) == lwtunnelIPDst && l == 8 {
			e.dst = net.IP(append([]byte(nil), b[4:8]...))
		}
		b = b[(l+3)&^3:]
	}
	return nil
}

func (e *ipEncap) String() string { return "ip dst " + e.dst.String() }

func (e *ipEncap) Equal(x netlink.Encap) bool {
	o, ok := x.(*ipEncap)
	return ok && e.dst.Equal(o.dst)
}

// SyncRoutes makes the node's tunnel routes exactly want: for each tunnel a route to
// the PodCIDR into the VXLAN device, via the remote node's IP (on-link, with a
// permanent neighbour entry for its overlay MAC, since the device cannot ARP) and with
// the remote node as encapsulation destination, at the tunnel's route MTU. Other
// routes with ProtoTunnel, and neighbours of nodes that left, are removed.
// src (this node's IP) is each route's preferred source: the node's own traffic to
// other nodes' pods must leave from it, the inner source the other node's tunnel
// peer rule accepts from this node; without it the kernel takes the first global
// address it finds (the VXLAN device has none), which on a node with an address on
// lo is that one, and the other node drops the packets (DROP_UNKNOWN_TUNNEL_PEER).
// The kernel deletes routes whose preferred source is removed from the node; the
// next sync puts them back (the agent's host-addresses loop asks for one when the
// node IP comes back; else the Node resync). A src that is not an address of this
// node is left out.
func SyncRoutes(dev netlink.Link, want []Tunnel, routeMTU int, src netip.Addr, macOf func(netip.Addr) net.HardwareAddr) error {
	have, err := link.Dump("tunnel routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: ProtoTunnel}, netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return fmt.Errorf("list tunnel routes: %w", err)
	}
	wanted := map[string]bool{}
	var errs []error
	for _, t := range want {
		wanted[t.PodCIDR.String()] = true
		err := netlink.NeighSet(&netlink.Neigh{LinkIndex: dev.Attrs().Index, Family: unix.AF_INET,
			State: netlink.NUD_PERMANENT, IP: t.NodeIP.AsSlice(), HardwareAddr: macOf(t.NodeIP)})
		if err == nil {
			r := &netlink.Route{
				LinkIndex: dev.Attrs().Index,
				Dst:       &net.IPNet{IP: t.PodCIDR.Addr().AsSlice(), Mask: net.CIDRMask(t.PodCIDR.Bits(), 32)},
				Gw:        t.NodeIP.AsSlice(),
				Flags:     int(netlink.FLAG_ONLINK),
				Encap:     &ipEncap{dst: t.NodeIP.AsSlice()},
				MTU:       routeMTU,
				Protocol:  ProtoTunnel,
			}
			if src.Is4() {
				r.Src = src.AsSlice()
			}
			err = netlink.RouteReplace(r)
			if err != nil && r.Src != nil && errors.Is(err, unix.EINVAL) { // src is not this node's
				r.Src = nil
				err = netlink.RouteReplace(r)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tunnel route %v to node %s (%v): %w", t.PodCIDR, t.Node, t.NodeIP, err))
		}
	}
	for _, r := range have {
		if r.Dst != nil && !wanted[r.Dst.String()] {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("remove tunnel route %v: %w", r.Dst, err))
			}
		}
	}
	nodes := map[netip.Addr]bool{}
	for _, t := range want {
		nodes[t.NodeIP] = true
	}
	neighs, err := link.Dump("tunnel neighbours", func() ([]netlink.Neigh, error) {
		return netlink.NeighList(dev.Attrs().Index, unix.AF_INET)
	})
	errs = append(errs, err)
	for _, n := range neighs {
		if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && !nodes[ip] {
			errs = append(errs, netlink.NeighDel(&n))
		}
	}
	return errors.Join(errs...)
}
