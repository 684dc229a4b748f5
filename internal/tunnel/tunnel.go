package tunnel

import (
	"net/netip"
	"sort"
)

// DeviceName is the VXLAN device of tunnel mode.
const DeviceName = "myelin_vxlan"

// Overhead is what VXLAN over IPv4 adds to a packet: outer IPv4 (20), UDP (8), VXLAN
// (8) and the inner Ethernet header (14). Pod routes carry the device MTU minus this.
const Overhead = 50

// Node is what the tunnel table needs of a Kubernetes Node.
type Node struct {
	Name    string
	IP      netip.Addr
	PodCIDR netip.Prefix
}

// Tunnel is one entry of the tunnel table: pods of PodCIDR live behind NodeIP.
type Tunnel struct {
	Node    string
	PodCIDR netip.Prefix
	NodeIP  netip.Addr
}

// DesiredTunnels returns a tunnel to every other node that has a PodCIDR and an IP;
// unlike direct routes, a tunnel works whatever segment the other node is on.
func DesiredTunnels(self string, nodes []Node) []Tunnel {
	var out []Tunnel
	for _, n := range nodes {
		if n.Name == self || !n.PodCIDR.IsValid() || !n.IP.IsValid() {
			continue
		}
		out = append(out, Tunnel{Node: n.Name, PodCIDR: n.PodCIDR, NodeIP: n.IP})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PodCIDR.Addr().Less(out[j].PodCIDR.Addr()) })
	return out
}
