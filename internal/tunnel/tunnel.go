package tunnel

import (
	"errors"
	"net/netip"
	"sort"

	"github.com/myelin-net/myelin/internal/routing"
)

// DeviceName is the VXLAN device of tunnel mode.
const DeviceName = "myelin_vxlan"

// Overhead is what VXLAN over IPv4 adds to a packet: outer IPv4 (20), UDP (8), VXLAN
// (8) and the inner Ethernet header (14). Pod routes carry the device MTU minus this.
const Overhead = 50

// Node is what the tunnel table needs of a Kubernetes Node: the same as route
// planning needs, so the agent converts a Node object once for both.
type Node = routing.Node

// Tunnel is one entry of the tunnel table: pods of PodCIDR live behind NodeIP.
type Tunnel struct {
	Node    string
	PodCIDR netip.Prefix
	NodeIP  netip.Addr
}

// DesiredTunnels returns a tunnel to every other node that has a PodCIDR and an IP
// and that routing.Peers accepts, and the nodes it refuses; unlike direct routes, a
// tunnel works whatever segment the other node is on. The tunnel map this fills also
// decides which outer source the datapath accepts VXLAN from for a PodCIDR.
func DesiredTunnels(local routing.Local, nodes []Node) ([]Tunnel, []routing.Unroutable) {
	peers, refused := routing.Peers(local, nodes)
	out := make([]Tunnel, 0, len(peers))
	for _, n := range peers {
		out = append(out, Tunnel{Node: n.Name, PodCIDR: n.PodCIDR, NodeIP: n.IP})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PodCIDR.Addr().Less(out[j].PodCIDR.Addr()) })
	return out, refused
}

// Map is the datapath's tunnel tables (datapath.Datapath on a node): PodCIDR to
// node IP, and the set of node IPs (for tunnel-pod-to-node).
type Map interface {
	UpsertTunnel(podCIDR netip.Prefix, nodeIP netip.Addr) error
	DeleteTunnel(podCIDR netip.Prefix) error
	Tunnels() (map[netip.Prefix]netip.Addr, error)
	UpsertTunnelNode(nodeIP netip.Addr) error
	DeleteTunnelNode(nodeIP netip.Addr) error
	TunnelNodes() ([]netip.Addr, error)
}

// SyncMap makes m hold exactly want: every wanted tunnel is written, every other
// entry deleted, and the node set is exactly receivers (the nodes that take pods'
// packets to their IP through the overlay). It goes on past a failed entry and
// returns every error.
func SyncMap(m Map, want []Tunnel, receivers []netip.Addr) error {
	var errs []error
	keep := map[netip.Prefix]bool{}
	nodes := map[netip.Addr]bool{}
	for _, ip := range receivers {
		nodes[ip] = true
	}
	for _, t := range want {
		keep[t.PodCIDR] = true
		errs = append(errs, m.UpsertTunnel(t.PodCIDR, t.NodeIP))
	}
	have, err := m.Tunnels()
	errs = append(errs, err)
	for cidr := range have {
		if !keep[cidr] {
			errs = append(errs, m.DeleteTunnel(cidr))
		}
	}
	for ip := range nodes {
		errs = append(errs, m.UpsertTunnelNode(ip))
	}
	haveNodes, err := m.TunnelNodes()
	errs = append(errs, err)
	for _, ip := range haveNodes {
		if !nodes[ip] {
			errs = append(errs, m.DeleteTunnelNode(ip))
		}
	}
	return errors.Join(errs...)
}
