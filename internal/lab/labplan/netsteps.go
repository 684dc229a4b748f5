package labplan

import (
	"net/netip"
)

// Step is one command that builds part of the lab's network. Steps are plain argv
// vectors for iproute2, sysctl and nft so that the plan can be printed, reviewed and
// unit-tested without root.
type Step []string

// ControlPlaneLinkNoIPv6 turns IPv6 off on ControlPlaneLink; with
// ControlPlaneLinkNoForwarding, the only settings the lab makes in the root netns
// (hostSteps), both the link's own.
var ControlPlaneLinkNoIPv6 = Step{"sysctl", "-eqw", "net.ipv6.conf." + ControlPlaneLink + ".disable_ipv6=1"}

// ControlPlaneLinkNoForwarding keeps the machine from forwarding what arrives on
// ControlPlaneLink: a new link takes its forwarding from the machine's ip_forward, and
// on a machine that forwards, a lab namespace's route via HostIP would otherwise send
// lab traffic off the machine.
var ControlPlaneLinkNoForwarding = Step{"sysctl", "-qw", "net.ipv4.conf." + ControlPlaneLink + ".forwarding=0"}

// InNS runs a non-iproute2 command inside a named netns without a new mount namespace.
func InNS(ns string, argv ...string) Step {
	return append(Step{"nsenter", "--net=" + NetNSPath(ns), "--"}, argv...)
}

// ipIn runs an iproute2 command inside a named netns.
func ipIn(ns string, args ...string) Step {
	return append(Step{"ip", "-n", ns}, args...)
}

// NetNSPath is where iproute2 keeps a named network namespace. It spells out
// netns.Path (a test keeps the two equal) so that the plan imports nothing that
// enters namespaces.
func NetNSPath(name string) string { return "/run/netns/" + name }

func (p Plan) bridgeFor(seg netip.Prefix) string {
	if seg == p.Addressing.SegmentB {
		return "br1"
	}
	return "br0"
}

func prefixOf(a netip.Addr, seg netip.Prefix) string {
	return netip.PrefixFrom(a, seg.Bits()).String()
}

// NetworkSteps returns, in order, the commands that build the lab's network (docs/architecture.md, "The lab's network plan").
// The root netns gets exactly one link (ControlPlaneLink) with the host address;
// forwarding is enabled only inside the lab's own namespaces.
func (p Plan) NetworkSteps() []Step {
	var s []Step
	s = append(s, p.namespaceSteps()...)
	s = append(s, p.underlaySteps()...)
	s = append(s, p.controlPlaneSteps()...)
	s = append(s, p.hostSteps()...)
	s = append(s, p.externalSteps()...)
	for _, n := range p.Nodes {
		s = append(s, p.nodeSteps(n)...)
	}
	return s
}

// namespaceSteps create the lab's namespaces, each with its loopback up.
func (p Plan) namespaceSteps() []Step {
	namespaces := []string{NetNS, ExtNS, CPNS}
	for _, n := range p.Nodes {
		namespaces = append(namespaces, n.Name)
	}
	var s []Step
	for _, ns := range namespaces {
		s = append(s, Step{"ip", "netns", "add", ns}, ipIn(ns, "link", "set", "lo", "up"))
	}
	return s
}

// underlaySteps build the underlay: bridges and a router in myelin-lab-net.
func (p Plan) underlaySteps() []Step {
	a := p.Addressing
	segments := []netip.Prefix{a.SegmentA}
	if p.Options.Underlay == UnderlayL3 {
		segments = append(segments, a.SegmentB)
	}
	var s []Step
	for _, seg := range segments {
		br := p.bridgeFor(seg)
		s = append(s,
			ipIn(NetNS, "link", "add", br, "type", "bridge"),
			ipIn(NetNS, "addr", "add", prefixOf(a.RouterIP(seg), seg), "dev", br),
			ipIn(NetNS, "link", "set", br, "up"))
	}
	return append(s, InNS(NetNS, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
}

// controlPlaneSteps put the control plane in its own netns on segment A, its default
// route via the router; the supervisor adds routes to the nodes' PodCIDRs as the
// controller-manager assigns them (Plan.PodCIDRRoutes), so the apiserver reaches pods
// (proxy, webhooks).
func (p Plan) controlPlaneSteps() []Step {
	a := p.Addressing
	return []Step{
		ipIn(NetNS, "link", "add", "cp0", "type", "veth", "peer", "name", "eth0", "netns", CPNS),
		ipIn(NetNS, "link", "set", "cp0", "master", "br0", "up"),
		ipIn(CPNS, "addr", "add", prefixOf(a.ControlPlaneIP(), a.SegmentA), "dev", "eth0"),
		ipIn(CPNS, "link", "set", "eth0", "up"),
		ipIn(CPNS, "route", "add", "default", "via", a.RouterIP(a.SegmentA).String()),
	}
}

// hostSteps connect the developer's machine: the only thing in the root netns, one
// address on segment A. IPv6 is off on that link before it comes up: a process in a
// lab namespace (a pod) could otherwise send a router advertisement that installs a
// default route in the root netns. Forwarding is off on it too, so that the machine
// never routes what a lab namespace sends to HostIP onwards (off the machine). Both
// settings are the link's own (-e: a kernel without IPv6 has none) and leave with it;
// a later write of the machine's ip_forward (net.ipv4.conf.all.forwarding) sets every
// link's again, this one's included.
func (p Plan) hostSteps() []Step {
	a := p.Addressing
	return []Step{
		{"ip", "link", "add", ControlPlaneLink, "type", "veth", "peer", "name", "host0", "netns", NetNS},
		ControlPlaneLinkNoIPv6,
		ControlPlaneLinkNoForwarding,
		{"ip", "addr", "add", prefixOf(a.HostIP(), a.SegmentA), "dev", ControlPlaneLink},
		{"ip", "link", "set", ControlPlaneLink, "up"},
		ipIn(NetNS, "link", "set", "host0", "master", "br0", "up"),
	}
}

// externalSteps build the external host behind the router.
func (p Plan) externalSteps() []Step {
	a := p.Addressing
	return []Step{
		ipIn(NetNS, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0", "netns", ExtNS),
		ipIn(NetNS, "addr", "add", prefixOf(a.ExternalGateway(), a.External), "dev", "ext0"),
		ipIn(NetNS, "link", "set", "ext0", "up"),
		ipIn(ExtNS, "addr", "add", prefixOf(a.ExternalServerIP(), a.External), "dev", "eth0"),
		ipIn(ExtNS, "link", "set", "eth0", "up"),
		ipIn(ExtNS, "route", "add", "default", "via", a.ExternalGateway().String()),
	}
}

// nodeSteps connect one node: eth0 on its segment, default route via the router,
// forwarding on.
func (p Plan) nodeSteps(n Node) []Step {
	return []Step{
		ipIn(NetNS, "link", "add", n.Peer, "type", "veth", "peer", "name", "eth0", "netns", n.Name),
		ipIn(NetNS, "link", "set", n.Peer, "master", p.bridgeFor(n.Segment), "up"),
		ipIn(n.Name, "addr", "add", prefixOf(n.IP, n.Segment), "dev", "eth0"),
		ipIn(n.Name, "link", "set", "eth0", "up"),
		ipIn(n.Name, "route", "add", "default", "via", n.Gateway.String()),
		InNS(n.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"),
	}
}
