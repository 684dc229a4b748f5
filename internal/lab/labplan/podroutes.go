package labplan

import (
	"net/netip"
	"sort"
)

// Route is one route the lab keeps in one of its namespaces: Dst via Via.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// PodCIDRRoutes returns the routes that let the control plane (netns CPNS) reach every
// node's pods, given the PodCIDRs the controller-manager assigned (node name → PodCIDR;
// nodes not in the plan are ignored). A node on segment A is reached directly; a node
// on segment B through the router (the control plane's default route), which gets a
// route to that node's PodCIDR. Replies leave the pods towards the control-plane
// address like any other traffic to segment A, so no mode needs more.
func (p Plan) PodCIDRRoutes(podCIDRs map[string]netip.Prefix) (controlPlane, router []Route) {
	for _, n := range p.Nodes {
		cidr, ok := podCIDRs[n.Name]
		if !ok || !cidr.IsValid() {
			continue
		}
		if n.Segment == p.Addressing.SegmentA {
			controlPlane = append(controlPlane, Route{Dst: cidr.Masked(), Via: n.IP})
		} else {
			router = append(router, Route{Dst: cidr.Masked(), Via: n.IP})
		}
	}
	byDst := func(rs []Route) {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Dst.String() < rs[j].Dst.String() })
	}
	byDst(controlPlane)
	byDst(router)
	return controlPlane, router
}
