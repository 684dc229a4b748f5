package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/myelin-net/myelin/internal/maglev"
)

// checkLoadBalancing validates the load balancing fields of cfg.
func checkLoadBalancing(cfg Config) error {
	if !cfg.LoadBalancing {
		return nil
	}
	if !cfg.NodeIP.Is4() || !cfg.NodeIP.IsGlobalUnicast() {
		return fmt.Errorf("load datapath: load balancing with node IP %v: set Config.NodeIP to the node's unicast IPv4 address (the NodePort address)", cfg.NodeIP)
	}
	if !cfg.ClusterCIDR.IsValid() || !cfg.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("load datapath: load balancing with cluster CIDR %v: set Config.ClusterCIDR to the IPv4 pod CIDR of the cluster", cfg.ClusterCIDR)
	}
	if cfg.MaglevTableSize != 0 && !maglev.IsPrime(int(cfg.MaglevTableSize)) {
		return fmt.Errorf("load datapath: Maglev table size %d is not prime: use a prime such as 251, 1021, 4093, 16381 or 65521, or 0 for random selection", cfg.MaglevTableSize)
	}
	return nil
}

// configureLoadBalancing writes the load balancing constants and map sizes:
// with load balancing off every service map has one entry, so a node
// without it does not pay for the conntrack table.
func configureLoadBalancing(specs *myelinSpecs, cfg Config) error {
	var (
		enabled uint8
		maglev  uint32
	)
	if cfg.LoadBalancing {
		enabled, maglev = 1, cfg.MaglevTableSize
	}
	if err := specs.LbEnabled.Set(enabled); err != nil {
		return fmt.Errorf("set lb_enabled: %w", err)
	}
	if err := specs.MaglevTableSize.Set(maglev); err != nil {
		return fmt.Errorf("set maglev_table_size: %w", err)
	}
	// The fixed sizes are the object's own (bpf/lib/maps.h): there is no Go copy.
	// The NodePort SNAT tables are sized by configuration; off, every map has one entry.
	if cfg.NodePortSynMax != 0 {
		specs.MyelinNodeportSyn.MaxEntries = cfg.NodePortSynMax
	}
	if cfg.NodePortNATMax != 0 {
		specs.MyelinNodeportNat.MaxEntries = cfg.NodePortNATMax
	}
	if cfg.NodePortUDPMax != 0 {
		specs.MyelinNodeportUdp.MaxEntries = cfg.NodePortUDPMax
	}
	for _, spec := range []*ebpf.MapSpec{specs.MyelinLbServices, specs.MyelinLbSlots, specs.MyelinLbBackends, specs.MyelinLbPorts, specs.MyelinLbNodeports,
		specs.MyelinLbMaglev, specs.MyelinLbAffinity, specs.MyelinLbCt, specs.MyelinLbCtNodeport, specs.MyelinLbCtNodeportSyn,
		specs.MyelinNodeportSyn, specs.MyelinNodeportNat, specs.MyelinNodeportUdp} {
		if !cfg.LoadBalancing {
			spec.MaxEntries = 1
		}
	}
	// Socket-LB's reverse maps are the socket programs' (bpf/lib/sock.h): shared
	// by pin when they run, else private ones nothing writes.
	var sockLB uint8
	if cfg.LoadBalancing && cfg.SocketLB {
		sockLB = 1
	} else {
		privateStub(specs.MyelinLbSockRev)
		privateStub(specs.MyelinLbSockPeer)
	}
	if err := specs.SockLb.Set(sockLB); err != nil {
		return fmt.Errorf("set sock_lb: %w", err)
	}
	// The template only types the inner maps; BPF_F_INNER_MAP accepts any size.
	specs.MyelinLbMaglev.InnerMap.MaxEntries = max(maglev, 1)
	return nil
}
