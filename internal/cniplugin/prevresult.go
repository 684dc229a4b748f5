package cniplugin

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/myelin-net/myelin/internal/api"
)

// fixPrevResult is what to do about a CHECK's missing or bad prevResult.
const fixPrevResult = `CHECK compares the pod's network with "prevResult", the result of the attachment's ADD, ` +
	`which the runtime must pass (CNI spec, CHECK; libcni passes the result it cached at ADD): check the runtime's CNI ` +
	`invocation and its result cache; to run CHECK by hand, pass the ADD's output as "prevResult"`

func invalidPrevResult(format string, a ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid prevResult for CHECK",
		`"prevResult" `+fmt.Sprintf(format, a...)+"; "+fixPrevResult)
}

// prevAttachment is what a CHECK's prevResult says of the attachment: the ADD's
// result and, in it, the pod's interface (CNI_IFNAME in CNI_NETNS).
type prevAttachment struct {
	*types100.Result
	pod int // index of the pod's interface in Interfaces
}

// parsePrevResult reads a CHECK's prevResult, which every version myelin-cni speaks
// requires (CHECK came with 0.4.0), and checks that it describes the attachment: it
// lists ifName in the sandbox netnsPath with at least one address, its MACs are MACs
// and its addresses name interfaces it lists.
func parsePrevResult(conf *NetConf, ifName, netnsPath string) (prevAttachment, error) {
	if conf.RawPrevResult == nil {
		return prevAttachment{}, invalidPrevResult("is missing")
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return prevAttachment{}, invalidPrevResult("can't be read: %s", clip(err.Error()))
	}
	res, err := types100.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return prevAttachment{}, invalidPrevResult("can't be read as a CNI %s result: %s", conf.CNIVersion, clip(err.Error()))
	}
	if err := nullEntry(res); err != nil {
		return prevAttachment{}, err
	}
	prev := prevAttachment{Result: res, pod: -1}
	for i, iface := range res.Interfaces {
		if iface.Name == ifName && iface.Sandbox == netnsPath {
			prev.pod = i
		}
		if _, err := net.ParseMAC(iface.Mac); iface.Mac != "" && err != nil {
			return prevAttachment{}, invalidPrevResult("lists interface %s with MAC %s, which is no MAC address", quote(iface.Name), quote(iface.Mac))
		}
	}
	if prev.pod < 0 {
		return prevAttachment{}, invalidPrevResult("lists no interface %s in sandbox %s (CNI_IFNAME, CNI_NETNS), so it is not this attachment's; it lists %s",
			quote(ifName), quote(netnsPath), listInterfaces(res.Interfaces))
	}
	for i, ip := range res.IPs {
		if ip.Interface != nil && (*ip.Interface < 0 || *ip.Interface >= len(res.Interfaces)) {
			return prevAttachment{}, invalidPrevResult("ips[%d] (%s) names interface %d, but it lists %d interfaces", i, ip.Address.String(), *ip.Interface, len(res.Interfaces))
		}
	}
	if len(prev.addrsOf(prev.pod)) == 0 {
		return prevAttachment{}, invalidPrevResult("lists no address of interface %s, which myelin-cni's ADD gives one", ifName)
	}
	return prev, nil
}

// nullEntry refuses a result with a null interface, address or route (JSON
// null in a list, which the CNI library passes on as a nil entry).
func nullEntry(res *types100.Result) error {
	for i, iface := range res.Interfaces {
		if iface == nil {
			return invalidPrevResult("interfaces[%d] is null", i)
		}
	}
	for i, ip := range res.IPs {
		if ip == nil {
			return invalidPrevResult("ips[%d] is null", i)
		}
	}
	for i, r := range res.Routes {
		if r == nil {
			return invalidPrevResult("routes[%d] is null", i)
		}
	}
	return nil
}

// listInterfaces names interfaces and their sandboxes, for an error.
func listInterfaces(ifaces []*types100.Interface) string {
	if len(ifaces) == 0 {
		return "no interface"
	}
	var s []string
	for _, iface := range ifaces {
		where := "on the node"
		if iface.Sandbox != "" {
			where = "in " + quote(iface.Sandbox)
		}
		s = append(s, quote(iface.Name)+" "+where)
	}
	return strings.Join(s, ", ")
}

// addrsOf is the addresses prevResult gives interface i.
func (p prevAttachment) addrsOf(i int) []netip.Prefix {
	var out []netip.Prefix
	for _, ip := range p.IPs {
		if ip.Interface != nil && *ip.Interface == i {
			if pfx, ok := prefixOf(ip.Address); ok {
				out = append(out, pfx)
			}
		}
	}
	return out
}

// prevResultProblems compares the attachment as prev describes it with the pod's
// network namespace (podNet, of the sandbox netnsPath), the host veth (host, named
// as the agent recorded) and the agent's endpoint: each interface prev lists in the
// pod's namespace exists with its MAC and addresses, the host veth it lists has its
// MAC, each route it lists is in the pod's namespace, and the pod's address is the
// agent's. Interfaces in other sandboxes, and the node's other than myelin's, are
// other plugins' (a chain's), which their own CHECK verifies.
func prevResultProblems(prev prevAttachment, netnsPath string, podNet netState, host namedLink, ep api.Endpoint) []string {
	var problems []string
	for i, iface := range prev.Interfaces {
		switch {
		case iface.Sandbox == netnsPath:
			problems = append(problems, podIfaceProblems(iface, prev.addrsOf(i), podNet)...)
		case iface.Sandbox == "" && iface.Name == host.name:
			if p := macProblem("host veth "+host.name, host.mac, iface.Mac); p != "" {
				problems = append(problems, p)
			}
		case iface.Sandbox == "" && api.IsHostIfName(iface.Name):
			problems = append(problems, fmt.Sprintf("prevResult lists host veth %s, the agent's endpoint has %s (prevResult is another container's)",
				quote(iface.Name), host.name))
		}
	}
	podIf := prev.Interfaces[prev.pod].Name
	addrs := prev.addrsOf(prev.pod)
	if want, err := netip.ParseAddr(ep.IP); err == nil && !containsAddr(addrs, want) {
		problems = append(problems, fmt.Sprintf("prevResult gives %s %s, the agent's endpoint has %s", podIf, joinPrefixes(addrs), ep.IP))
	}
	for _, r := range prev.Routes {
		if !podNet.hasRoute(r) {
			problems = append(problems, fmt.Sprintf("route %s (prevResult) is not in the pod's network namespace", routeString(r)))
		}
	}
	return problems
}

// podIfaceProblems compares an interface prevResult lists in the pod's network
// namespace, with its addresses, with what the namespace has.
func podIfaceProblems(iface *types100.Interface, addrs []netip.Prefix, podNet netState) []string {
	l, ok := podNet.links[iface.Name]
	if !ok {
		return []string{fmt.Sprintf("interface %s (prevResult) is not in the pod's network namespace", quote(iface.Name))}
	}
	var problems []string
	if p := macProblem("interface "+iface.Name, l.mac, iface.Mac); p != "" {
		problems = append(problems, p)
	}
	for _, a := range addrs {
		if !containsPrefix(l.addrs, a) {
			problems = append(problems, fmt.Sprintf("address %s (prevResult) is not on %s (it has %s)", a, iface.Name, joinPrefixes(sameFamily(l.addrs, a))))
		}
	}
	return problems
}

// macProblem says how a link's MAC differs from the one prevResult lists (none
// listed: no difference).
func macProblem(what string, got net.HardwareAddr, listed string) string {
	want, err := net.ParseMAC(listed)
	if listed == "" || err != nil || want.String() == got.String() {
		return ""
	}
	return fmt.Sprintf("%s has MAC %s, prevResult lists %s", what, got, want)
}

// routeString is a prevResult route as the error names it.
func routeString(r *types.Route) string {
	if r.GW == nil {
		return r.Dst.String()
	}
	return r.Dst.String() + " via " + r.GW.String()
}

// prefixOf is n as a netip.Prefix (IPv4 unmapped).
func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 8*net.IPv6len && ip.Is4() {
		ones -= bits - ip.BitLen() // a 16-byte mask of an IPv4 address
	}
	if bits == 0 || ones < 0 || ones > ip.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ones), true
}

func containsPrefix(list []netip.Prefix, p netip.Prefix) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

func containsAddr(list []netip.Prefix, a netip.Addr) bool {
	for _, q := range list {
		if q.Addr() == a {
			return true
		}
	}
	return false
}

// sameFamily is the prefixes of list of p's address family (a pod's IPv6 link-local
// address says nothing about its IPv4 one).
func sameFamily(list []netip.Prefix, p netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, q := range list {
		if q.Addr().Is4() == p.Addr().Is4() {
			out = append(out, q)
		}
	}
	return out
}

func joinPrefixes(list []netip.Prefix) string {
	if len(list) == 0 {
		return "no address"
	}
	const most = 8 // a pod with NET_ADMIN decides how many its interface has
	s := make([]string, 0, min(len(list), most))
	for _, p := range list[:min(len(list), most)] {
		s = append(s, p.String())
	}
	if len(list) > most {
		s = append(s, fmt.Sprintf("and %d more", len(list)-most))
	}
	return strings.Join(s, ", ")
}
