package tunnel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/link"
)

// NodeTable is the routing table of the encap routes to other nodes' IPs that this
// node's pods' packets take with legacy host routing and tunnel-pod-to-node
// (SyncPodToNode); NodeRulePriority the priority of the rule sending the pods'
// packets there, before the main table's (32766).
const (
	NodeTable        = 2030
	NodeRulePriority = 2030
)

// SyncPodToNode makes pods' packets to the receivers' IPs take the overlay when the
// stack routes them (legacy host routing; BPF host routing encapsulates them in
// myelin_from_pod): with on, a rule "from podCIDR lookup NodeTable" and in that table
// an encap route per receiver into the overlay device, so everything
// else from the pods (no route there) goes on to the main table; the node's own
// traffic is not from podCIDR. Off (plain, BPF host routing, native routing) removes
// both. Other rules of NodeTable (a PodCIDR that changed) and other routes in it are
// removed. The permanent neighbour entries of the nodes' overlay MACs are SyncRoutes'.
func SyncPodToNode(dev netlink.Link, podCIDR netip.Prefix, receivers []netip.Addr, routeMTU int, on bool) error {
	var errs []error
	rules, err := link.Dump("pod-to-node rules", func() ([]netlink.Rule, error) {
		return netlink.RuleListFiltered(unix.AF_INET, &netlink.Rule{Table: NodeTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return fmt.Errorf("list the pod-to-node rules: %w", err)
	}
	want := on && podCIDR.IsValid()
	found := false
	for _, r := range rules {
		if want && r.Src != nil && r.Src.String() == podCIDR.Masked().String() && r.Priority == NodeRulePriority {
			found = true
			continue
		}
		if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove pod-to-node rule from %v: %w", r.Src, err))
		}
	}
	if want && !found {
		r := netlink.NewRule()
		r.Family, r.Table, r.Priority = unix.AF_INET, NodeTable, NodeRulePriority
		r.Src = &net.IPNet{IP: podCIDR.Masked().Addr().AsSlice(), Mask: net.CIDRMask(podCIDR.Bits(), 32)}
		if err := netlink.RuleAdd(r); err != nil {
			errs = append(errs, fmt.Errorf("add the pod-to-node rule from %v: %w", podCIDR, err))
		}
	}
	have, err := link.Dump("pod-to-node routes", func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: NodeTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list the pod-to-node routes: %w", err))...)
	}
	keep := map[string]bool{}
	if want {
		for _, ip := range receivers {
			keep[netip.PrefixFrom(ip, 32).String()] = true
			// The destination is its own next hop on the device (scope link, no
			// gateway), addressed to the node's overlay MAC by SyncRoutes'
			// permanent neighbour entry.
			r := &netlink.Route{LinkIndex: dev.Attrs().Index, Table: NodeTable, Scope: netlink.SCOPE_LINK,
				Dst:   &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)},
				Encap: &ipEncap{dst: ip.AsSlice()}, MTU: routeMTU, Protocol: ProtoTunnel}
			if err := netlink.RouteReplace(r); err != nil {
				errs = append(errs, fmt.Errorf("pod-to-node route to %v: %w", ip, err))
			}
		}
	}
	for _, r := range have {
		if r.Dst == nil || !keep[r.Dst.String()] {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("remove pod-to-node route %v: %w", r.Dst, err))
			}
		}
	}
	return errors.Join(errs...)
}
