package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// noMasqueradeMax is the size of myelin_nomasq (NOMASQ_MAX_ENTRIES in bpf/lib/maps.h).
const noMasqueradeMax = 4096

// checkMasquerade validates the masquerade fields of cfg.
func checkMasquerade(cfg Config) error {
	if !cfg.Masquerade {
		return nil
	}
	if !cfg.NodeIP.Is4() || !cfg.NodeIP.IsGlobalUnicast() {
		return fmt.Errorf("load datapath: masquerade with node IP %v: set Config.NodeIP to the node's unicast IPv4 address", cfg.NodeIP)
	}
	if !cfg.ClusterCIDR.IsValid() || !cfg.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("load datapath: masquerade with cluster CIDR %v: set Config.ClusterCIDR to the IPv4 pod CIDR of the cluster", cfg.ClusterCIDR)
	}
	return nil
}

// configureAddresses writes the masquerade constants and the node IP and
// cluster CIDR that load balancing and the tunnel's source checks share; the
// node IP and cluster CIDR are set whenever Config has them (IPv4), as is the
// health address the host source check lets the node send from, and this
// node's PodCIDR, which no other host may send from (LocalPodCIDR).
func configureAddresses(specs *myelinSpecs, cfg Config) error {
	var (
		enabled                           uint8
		nodeIP, health, cidr, mk, pod, pm uint32
	)
	if cfg.Masquerade {
		enabled = 1
	}
	// NetworkPolicy lets the node's own address in (kubelet probes), so the
	// node IP is set whenever known.
	if cfg.NodeIP.Is4() {
		nodeIP = networkUint32(cfg.NodeIP)
	}
	if cfg.HealthIP.Is4() {
		health = networkUint32(cfg.HealthIP)
	}
	if cfg.ClusterCIDR.IsValid() && cfg.ClusterCIDR.Addr().Is4() {
		cidr, mk = networkPrefix(cfg.ClusterCIDR)
	}
	if cfg.LocalPodCIDR.IsValid() { // IPv4, checked by Load
		pod, pm = networkPrefix(cfg.LocalPodCIDR)
	}
	for _, v := range []struct {
		name string
		spec *ebpf.VariableSpec
		val  any
	}{
		{"masq_enabled", specs.MasqEnabled, enabled},
		{"node_ip", specs.NodeIp, nodeIP},
		{"node_health_ip", specs.NodeHealthIp, health},
		{"cluster_cidr_addr", specs.ClusterCidrAddr, cidr},
		{"cluster_cidr_mask", specs.ClusterCidrMask, mk},
		{"local_pod_cidr_addr", specs.LocalPodCidrAddr, pod},
		{"local_pod_cidr_mask", specs.LocalPodCidrMask, pm},
	} {
		if err := v.spec.Set(v.val); err != nil {
			return fmt.Errorf("set %s: %w", v.name, err)
		}
	}
	// Zero ports keep the object's own (bpf/lib/config.h): there is no Go copy.
	if cfg.NATPortMin == 0 && cfg.NATPortMax == 0 {
		return nil
	}
	if err := specs.NatPortMin.Set(cfg.NATPortMin); err != nil {
		return fmt.Errorf("set nat_port_min: %w", err)
	}
	if err := specs.NatPortMax.Set(cfg.NATPortMax); err != nil {
		return fmt.Errorf("set nat_port_max: %w", err)
	}
	return nil
}

// networkPrefix is the IPv4 prefix p as the datapath's address and mask
// constants hold it (networkUint32 of each).
func networkPrefix(p netip.Prefix) (addr, mask uint32) {
	return networkUint32(p.Masked().Addr()), binary.NativeEndian.Uint32(net.CIDRMask(p.Bits(), 32))
}

// networkUint32 is the IPv4 address a as the datapath stores it: its bytes
// in network order, loaded as a host integer.
func networkUint32(a netip.Addr) uint32 {
	b := a.Unmap().As4()
	return binary.NativeEndian.Uint32(b[:])
}

// SetNoMasquerade replaces the set of destinations that are never
// masqueraded with prefixes: the cluster CIDR, ipv4-native-routing-cidr,
// each of non-masquerade-cidrs and the node IPs or subnets. Lookups are
// longest-prefix matches; host bits are ignored. New prefixes are added
// before stale ones are removed, so a prefix in both the old and the new set
// never misses. Call it before AttachToNetdev: an empty set masquerades
// traffic to other pods too. At most 4,096 prefixes, all IPv4.
func (d *Datapath) SetNoMasquerade(prefixes []netip.Prefix) error {
	want := make(map[myelinNomasqKey]bool, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("set no-masquerade destinations: %v is not an IPv4 prefix", p)
		}
		want[myelinNomasqKey{Prefixlen: uint32(p.Bits()), Addr: networkUint32(p.Masked().Addr())}] = true
	}
	if len(want) > noMasqueradeMax {
		return fmt.Errorf("set no-masquerade destinations: %d prefixes, at most %d fit: merge them into fewer CIDRs", len(want), noMasqueradeMax)
	}
	m := d.objs.MyelinNomasq
	for k := range want {
		if err := m.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("add no-masquerade destination %v: %w", prefixOfKey(k), err)
		}
	}
	var (
		k     myelinNomasqKey
		v     uint8
		stale []myelinNomasqKey
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list no-masquerade destinations: %w", err)
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove no-masquerade destination %v: %w", prefixOfKey(k), err)
		}
	}
	return nil
}

// NoMasquerade returns the destinations that are never masqueraded, masked.
func (d *Datapath) NoMasquerade() ([]netip.Prefix, error) {
	var (
		k   myelinNomasqKey
		v   uint8
		out []netip.Prefix
	)
	it := d.objs.MyelinNomasq.Iterate()
	for it.Next(&k, &v) {
		out = append(out, prefixOfKey(k))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list no-masquerade destinations: %w", err)
	}
	return out, nil
}

// prefixOfKey is the prefix an LPM key stands for.
func prefixOfKey(k myelinNomasqKey) netip.Prefix {
	return netip.PrefixFrom(addrFromNetwork(k.Addr), int(k.Prefixlen))
}
