package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/link"
	"github.com/myelin-net/myelin/internal/netns"
)

// cmdCheck verifies that the pod's network is as the prevResult (its ADD's result)
// describes it and as the agent recorded it: the interfaces with their MACs, the
// addresses, the routes, the host veth, the gateway route and neighbour entry; and that the datapath
// serves it (map entry and programs, checked by the agent). A failure names the pod,
// what differs and what to do.
func cmdCheck(args *skel.CmdArgs) error {
	conf, client, ref, err := setup("CHECK", args)
	if err != nil {
		return err
	}
	if err := checkPodNetNS("CHECK", args.Netns); err != nil {
		return err
	}
	prev, err := parsePrevResult(conf, args.IfName, args.Netns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.DefaultTimeout)
	defer cancel()
	ep, err := client.GetEndpoint(ctx, ref.ContainerID)
	if errors.Is(err, api.ErrNotFound) {
		return types.NewError(types.ErrUnknownContainer, "unknown container",
			fmt.Sprintf("the agent has no endpoint for container %s", ref.ContainerID))
	}
	if err != nil {
		return agentError("look up the endpoint", conf.Socket, err)
	}
	pod := fmt.Sprintf("pod %s/%s (container %s)", ep.Namespace, ep.Pod, ep.ContainerID)
	hostLink, err := netlink.LinkByName(ep.HostIfName)
	if err != nil {
		return types.NewError(types.ErrInternal, "host veth missing",
			fmt.Sprintf("%s: host veth %s: %v; delete the pod so it is recreated", pod, ep.HostIfName, err))
	}
	var podNet netState
	if err := netns.Do(args.Netns, func() (err error) { podNet, err = readNetState(); return err }); err != nil {
		return types.NewError(types.ErrInternal, "read the pod's network namespace", fmt.Sprintf("%s: %v", pod, err))
	}
	host := namedLink{name: ep.HostIfName, mac: hostLink.Attrs().HardwareAddr}
	if problems := podProblems(prev, args, podNet, host, ep); len(problems) > 0 {
		return types.NewError(types.ErrInternal, "pod network check failed",
			fmt.Sprintf("%s: %s; the pod's network changed after its ADD, or prevResult is not its ADD's result: delete the pod so it is recreated",
				pod, strings.Join(problems, "; ")))
	}
	return checkDatapath(ctx, client, conf, pod, ep)
}

// checkDatapath asks the agent whether the datapath serves the endpoint: its map
// entry (IP to the pod's veth and MACs) and myelin_from_pod/myelin_to_pod on its veth.
func checkDatapath(ctx context.Context, client *api.Client, conf *NetConf, pod string, ep api.Endpoint) error {
	res, err := client.CheckEndpoint(ctx, ep.ContainerID)
	if err != nil {
		return agentError("check the endpoint's datapath", conf.Socket, err)
	}
	if len(res.Problems) == 0 {
		return nil
	}
	return types.NewError(types.ErrInternal, "pod datapath broken",
		fmt.Sprintf("%s, IP %s on %s: %s; restart the myelin agent on this node (it re-programs every endpoint at start) or delete the pod",
			pod, ep.IP, ep.HostIfName, strings.Join(res.Problems, "; ")))
}

// podProblems is how the pod's network (podNet, the host veth host) differs from what
// prev describes and what the agent recorded (ep). A missing pod interface is the one
// problem: nothing else of it can be compared.
func podProblems(prev prevAttachment, args *skel.CmdArgs, podNet netState, host namedLink, ep api.Endpoint) []string {
	if _, ok := podNet.links[args.IfName]; !ok {
		return []string{fmt.Sprintf("interface %s is not in the pod's network namespace %s", args.IfName, args.Netns)}
	}
	return append(prevResultProblems(prev, args.Netns, podNet, host, ep), agentProblems(ep, args.IfName, podNet)...)
}

// agentProblems is how the pod's interface ifName differs from what the agent
// recorded and the datapath relies on: its MAC (the map entry's, which packets to
// the pod get), its address, and its default route via the gateway.
func agentProblems(ep api.Endpoint, ifName string, podNet netState) []string {
	l := podNet.links[ifName]
	var problems []string
	if l.mac.String() != ep.PodMAC {
		problems = append(problems, fmt.Sprintf("interface %s has MAC %s, the agent recorded %s", ifName, l.mac, ep.PodMAC))
	}
	if ip, err := netip.ParseAddr(ep.IP); err != nil || !containsPrefix(l.addrs, netip.PrefixFrom(ip, 32)) {
		problems = append(problems, fmt.Sprintf("interface %s lacks its address %s/32", ifName, ep.IP))
	}
	gw := netip.MustParseAddr(api.PodGateway)
	found := false
	for _, r := range podNet.routes {
		found = found || r.dev == ifName && r.dst.Bits() == 0 && r.dst.Addr().Is4() && r.gw == gw
	}
	if !found {
		problems = append(problems, fmt.Sprintf("interface %s has no default route via %s", ifName, api.PodGateway))
	}
	if p := gatewayNeighProblem(ep, ifName, podNet); p != "" {
		problems = append(problems, p)
	}
	return problems
}

// gatewayNeighProblem says how the gateway's neighbour entry on ifName differs from
// the one ADD made: permanent, at the host veth's MAC. Without it the pod asks for
// the gateway by ARP, which nothing answers (the address is on no link).
func gatewayNeighProblem(ep api.Endpoint, ifName string, podNet netState) string {
	gw := netip.MustParseAddr(api.PodGateway)
	for _, n := range podNet.neighs {
		if n.ip != gw || n.dev != ifName {
			continue
		}
		if n.permanent && n.mac.String() == ep.HostMAC {
			return ""
		}
		state := "not permanent"
		if n.permanent {
			state = "permanent"
		}
		return fmt.Sprintf("interface %s has neighbour %s at %s (%s), ADD made it permanent at the host veth's MAC %s",
			ifName, api.PodGateway, n.mac, state, ep.HostMAC)
	}
	return fmt.Sprintf("interface %s has no neighbour entry for its gateway %s, ADD made one (permanent, at the host veth's MAC %s)",
		ifName, api.PodGateway, ep.HostMAC)
}

// netState is what CHECK reads of a network namespace: its links by name, its
// main table's routes and its IPv4 neighbour entries.
type netState struct {
	links  map[string]linkState
	routes []routeState
	neighs []neighState
}

// neighState is an IPv4 neighbour entry on the link dev.
type neighState struct {
	ip        netip.Addr
	dev       string
	mac       net.HardwareAddr
	permanent bool
}

type linkState struct {
	mac   net.HardwareAddr
	addrs []netip.Prefix
}

// namedLink is a link of the node's namespace: the pod's host veth.
type namedLink struct {
	name string
	mac  net.HardwareAddr
}

// routeState is a route, one per next hop: gw is not valid for a route without one.
type routeState struct {
	dst netip.Prefix
	gw  netip.Addr
	dev string
}

// readNetState reads the calling thread's network namespace.
func readNetState() (netState, error) {
	links, err := link.Dump("links", netlink.LinkList)
	if err != nil {
		return netState{}, fmt.Errorf("list links: %w", err)
	}
	addrs, err := link.Dump("addresses", func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return netState{}, fmt.Errorf("list addresses: %w", err)
	}
	routes, err := link.Dump("routes", func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return netState{}, fmt.Errorf("list routes: %w", err)
	}
	neighs, err := link.Dump("neighbours", func() ([]netlink.Neigh, error) { return netlink.NeighList(0, unix.AF_INET) })
	if err != nil {
		return netState{}, fmt.Errorf("list neighbours: %w", err)
	}
	s := netState{links: map[string]linkState{}}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
		s.links[l.Attrs().Name] = linkState{mac: l.Attrs().HardwareAddr}
	}
	for _, a := range addrs {
		l, ok := s.links[names[a.LinkIndex]]
		if pfx, pok := prefixOf(*a.IPNet); ok && pok {
			l.addrs = append(l.addrs, pfx)
			s.links[names[a.LinkIndex]] = l
		}
	}
	for _, r := range routes {
		s.routes = append(s.routes, routeStates(r, names)...)
	}
	for _, n := range neighs {
		if ip, ok := netip.AddrFromSlice(n.IP); ok {
			s.neighs = append(s.neighs, neighState{ip: ip.Unmap(), dev: names[n.LinkIndex], mac: n.HardwareAddr,
				permanent: n.State&netlink.NUD_PERMANENT != 0})
		}
	}
	return s, nil
}

// routeStates is r, one per next hop.
func routeStates(r netlink.Route, names map[int]string) []routeState {
	dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0) // the kernel's default route may come without Dst
	if r.Family == netlink.FAMILY_V6 {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	if r.Dst != nil {
		pfx, ok := prefixOf(*r.Dst)
		if !ok {
			return nil
		}
		dst = pfx
	}
	if len(r.MultiPath) == 0 {
		return []routeState{{dst: dst, gw: addrOf(r.Gw), dev: names[r.LinkIndex]}}
	}
	out := make([]routeState, 0, len(r.MultiPath))
	for _, nh := range r.MultiPath {
		out = append(out, routeState{dst: dst, gw: addrOf(nh.Gw), dev: names[nh.LinkIndex]})
	}
	return out
}

// hasRoute reports whether the namespace has the route r of a CNI result: its
// destination, via its gateway if it names one.
func (s netState) hasRoute(r *types.Route) bool {
	dst, ok := prefixOf(r.Dst)
	if !ok {
		return false
	}
	gw := addrOf(r.GW)
	for _, have := range s.routes {
		if have.dst == dst.Masked() && (r.GW == nil || have.gw == gw) {
			return true
		}
	}
	return false
}

// addrOf is ip as a netip.Addr (IPv4 unmapped); not valid for nil.
func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}
