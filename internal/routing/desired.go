package routing

import (
	"fmt"
	"net/netip"
	"sort"
	"time"
)

// Node is what route planning needs of a Kubernetes Node.
type Node struct {
	Name    string
	IP      netip.Addr   // InternalIP
	PodCIDR netip.Prefix // invalid until allocated
	Created time.Time    // creationTimestamp: who came first keeps a contested PodCIDR
}

// NodeRoute is a route to another node's PodCIDR via that node's IP.
type NodeRoute struct {
	Node string
	Dst  netip.Prefix
	Via  netip.Addr
}

// Unroutable is a node that gets no route or tunnel, and why.
type Unroutable struct {
	Node   string
	Reason string
}

// DesiredNodeRoutes computes the direct routes of auto-direct-node-routes: one per
// other node that Peers accepts and whose IP is on one of this node's connected
// subnets. A node on another segment gets no route (a next hop that is not on-link
// would break), and is reported with the nodes Peers refuses, sorted by name.
func DesiredNodeRoutes(local Local, nodes []Node, connected []netip.Prefix) ([]NodeRoute, []Unroutable) {
	var routes []NodeRoute
	peers, skipped := Peers(local, nodes)
	for _, n := range peers {
		onLink := false
		for _, c := range connected {
			onLink = onLink || c.Contains(n.IP)
		}
		if !onLink {
			skipped = append(skipped, Unroutable{n.Name, fmt.Sprintf("node IP %v is not on this node's L2 segment (%v): auto-direct-node-routes needs all nodes on one segment; use routing-mode tunnel or let the underlay route %v",
				n.IP, connected, n.PodCIDR)})
			continue
		}
		routes = append(routes, NodeRoute{Node: n.Name, Dst: n.PodCIDR, Via: n.IP})
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].Dst.Addr().Less(routes[j].Dst.Addr()) })
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Node < skipped[j].Node })
	return routes, skipped
}
