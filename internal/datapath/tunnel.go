package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// TunnelPodToNode is how pods reach other nodes' IPs in tunnel mode
// (tunnel-pod-to-node; bpf/lib/config.h enum tunnel_pod_to_node_mode).
type TunnelPodToNode uint8

const (
	TunnelPodToNodePlain       TunnelPodToNode = 0 // plain, as routed
	TunnelPodToNodeEncapsulate TunnelPodToNode = 1 // through the overlay
	TunnelPodToNodeEnforce     TunnelPodToNode = 2 // through the overlay, and plain ones dropped
)

// configureTunnel writes tunnel mode's constants: the overlay device, this
// node's overlay MAC, the tunnel port and tunnel-pod-to-node; all zero without
// Tunnel.
func configureTunnel(specs *myelinSpecs, cfg Config) error {
	var tunnel, podToNode uint8
	var overlay uint32
	var port, overlayPort uint16 // network order, as the packet has it
	var mac [6]byte
	if cfg.Tunnel {
		if len(cfg.OverlayMAC) != len(mac) {
			return fmt.Errorf("tunnel mode needs Config.OverlayMAC, the 6-byte MAC of myelin_vxlan (got %q)", cfg.OverlayMAC)
		}
		tunnel, overlay, port, overlayPort = 1, uint32(cfg.OverlayIfIndex), htons(cfg.TunnelPort), htons(cfg.OverlayPort)
		copy(mac[:], cfg.OverlayMAC)
		podToNode = uint8(cfg.TunnelPodToNode)
	}
	if err := specs.TunnelPodToNode.Set(podToNode); err != nil {
		return fmt.Errorf("set tunnel_pod_to_node: %w", err)
	}
	if err := specs.OverlayPort.Set(overlayPort); err != nil {
		return fmt.Errorf("set overlay_port: %w", err)
	}
	if err := specs.RoutingTunnel.Set(tunnel); err != nil {
		return fmt.Errorf("set routing_tunnel: %w", err)
	}
	if err := specs.OverlayIfindex.Set(overlay); err != nil {
		return fmt.Errorf("set overlay_ifindex: %w", err)
	}
	if err := specs.TunnelPort.Set(port); err != nil {
		return fmt.Errorf("set tunnel_port: %w", err)
	}
	if err := specs.OverlayMac.Set(mac); err != nil {
		return fmt.Errorf("set overlay_mac: %w", err)
	}
	return nil
}

// UpsertTunnel creates or replaces the tunnel entry of another node: in
// tunnel mode, from_pod sends packets for podCIDR encapsulated to nodeIP.
// Lookups are longest-prefix matches. Both must be IPv4 (podCIDR not
// 4-in-6); podCIDR's host bits are ignored. It fails with ebpf.ErrMapFull wrapped when the map holds
// 1,024 PodCIDRs already.
func (d *Datapath) UpsertTunnel(podCIDR netip.Prefix, nodeIP netip.Addr) error {
	key, err := tunnelKey(podCIDR)
	if err != nil {
		return fmt.Errorf("upsert tunnel: %w", err)
	}
	node, err := tunnelNodeIP(nodeIP)
	if err != nil {
		return fmt.Errorf("upsert tunnel %s: %w", podCIDR, err)
	}
	value := myelinTunnelEndpoint{NodeIp: node}
	if err := d.objs.MyelinTunnel.Update(key, value, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("upsert tunnel %s via %s: %w", podCIDR, nodeIP, err)
	}
	return nil
}

// DeleteTunnel removes the tunnel entry of podCIDR; no error if there is none.
func (d *Datapath) DeleteTunnel(podCIDR netip.Prefix) error {
	key, err := tunnelKey(podCIDR)
	if err != nil {
		return fmt.Errorf("delete tunnel: %w", err)
	}
	err = d.objs.MyelinTunnel.Delete(key)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete tunnel %s: %w", podCIDR, err)
	}
	return nil
}

// Tunnels returns every tunnel entry: PodCIDR (masked) to node IP.
func (d *Datapath) Tunnels() (map[netip.Prefix]netip.Addr, error) {
	var (
		key   myelinTunnelLpmKey
		value myelinTunnelEndpoint
	)
	out := make(map[netip.Prefix]netip.Addr)
	it := d.objs.MyelinTunnel.Iterate()
	for it.Next(&key, &value) {
		prefix := netip.PrefixFrom(addrFromNetwork(key.Addr), int(key.Prefixlen))
		out[prefix] = addrFromNetwork(value.NodeIp)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list tunnels: %w", err)
	}
	return out, nil
}

// UpsertTunnelNode adds nodeIP, another node's InternalIP, to the tunnel node map:
// with tunnel-pod-to-node on, from_pod sends pods' packets to it encapsulated to
// nodeIP (Config.TunnelPodToNode). It fails with ebpf.ErrMapFull wrapped when the
// map holds 1,024 nodes already.
func (d *Datapath) UpsertTunnelNode(nodeIP netip.Addr) error {
	ip, err := tunnelNodeIP(nodeIP)
	if err != nil {
		return fmt.Errorf("upsert tunnel node: %w", err)
	}
	if err := d.objs.MyelinTunnelNodes.Update(ip, myelinTunnelEndpoint{NodeIp: ip}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("upsert tunnel node %s: %w", nodeIP, err)
	}
	return nil
}

// DeleteTunnelNode removes nodeIP from the tunnel node map; no error if it is not there.
func (d *Datapath) DeleteTunnelNode(nodeIP netip.Addr) error {
	node, err := endpointKey(nodeIP)
	if err != nil {
		return fmt.Errorf("delete tunnel node: %w", err)
	}
	err = d.objs.MyelinTunnelNodes.Delete(binary.NativeEndian.Uint32(node[:]))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete tunnel node %s: %w", nodeIP, err)
	}
	return nil
}

// TunnelNodes returns the node IPs of the tunnel node map.
func (d *Datapath) TunnelNodes() ([]netip.Addr, error) {
	var (
		key   uint32
		value myelinTunnelEndpoint
		out   []netip.Addr
	)
	it := d.objs.MyelinTunnelNodes.Iterate()
	for it.Next(&key, &value) {
		out = append(out, addrFromNetwork(key))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list tunnel nodes: %w", err)
	}
	return out, nil
}

// tunnelNodeIP is a node IP as the tunnel maps hold it (network order), or why
// it can't be one: not IPv4, or not a unicast address.
func tunnelNodeIP(nodeIP netip.Addr) (uint32, error) {
	node, err := endpointKey(nodeIP)
	if err != nil {
		return 0, fmt.Errorf("node IP: %w", err)
	}
	if !netip.AddrFrom4(node).IsGlobalUnicast() {
		return 0, fmt.Errorf("node IP %s is not a unicast address", nodeIP)
	}
	return binary.NativeEndian.Uint32(node[:]), nil
}

// tunnelKey is the LPM key of an IPv4 prefix: length, then the masked
// address in network order.
func tunnelKey(p netip.Prefix) (myelinTunnelLpmKey, error) {
	if !p.IsValid() || !p.Addr().Is4() {
		return myelinTunnelLpmKey{}, fmt.Errorf("PodCIDR %s is not an IPv4 prefix", p)
	}
	a := p.Masked().Addr().As4()
	return myelinTunnelLpmKey{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}, nil
}

// OverlayMAC is the MAC of the myelin_vxlan device of the node at nodeIP: 02:6d and
// the four octets of the IPv4 address. Every node can compute every other node's, so
// encapsulated frames (from BPF or from the kernel's encap routes with a permanent
// neighbour entry) are addressed to the receiving device without ARP, which a
// collect-metadata device cannot do. bpf/lib/tunnel.h's overlay_mac_of mirrors it.
func OverlayMAC(nodeIP netip.Addr) net.HardwareAddr {
	b := nodeIP.As4()
	return net.HardwareAddr{0x02, 0x6d, b[0], b[1], b[2], b[3]}
}
