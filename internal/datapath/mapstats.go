package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Map kinds group the maps the agent owns by what fills them (MapStat.Kind).
const (
	MapKindEndpoints = "endpoints" // one entry per local pod
	MapKindRouting   = "routing"   // tunnels, no-masquerade CIDRs
	MapKindServices  = "services"  // frontends, backends, slots, session affinity
	MapKindConntrack = "conntrack" // Service and NetworkPolicy connection tracking
	MapKindNAT       = "nat"       // masquerade and NodePort SNAT
	MapKindPolicy    = "policy"    // ipcache, per-pod flags, allow entries
	MapKindFragments = "fragments" // IPv4 fragments in flight
	MapKindFlows     = "flows"     // UDP/ICMP flows aggregated for flow records
)

// MapStat is how full one of the datapath's hash, LRU or LPM maps is.
type MapStat struct {
	Name    string // the map's name in bpf/lib/maps.h, e.g. "myelin_snat"
	Kind    string // a MapKind* constant
	Entries int
	Max     int
	// Err is why counting the map failed; Entries are then those counted
	// before the failure (see countEntries).
	Err error
}

// MapStats counts the entries of every map that can run full: endpoints,
// routing, NAT, conntrack, policy, fragments, flow state and, with load
// balancing, the Service maps. Arrays (always full by construction;
// myelin_policy_ct counts its slots in use), per-CPU counters and the ring
// buffer are left out. It reads each map (countEntries: a syscall per 4,096
// entries of a hash map), so call it for a scrape or a status, not per packet.
// A map that cannot be counted has its Err set; the others are counted all the
// same.
func (d *Datapath) MapStats() []MapStat {
	o := &d.objs
	maps := []struct {
		name, kind string
		m          *ebpf.Map
	}{
		{"myelin_endpoints", MapKindEndpoints, o.MyelinEndpoints},
		{"myelin_tunnel", MapKindRouting, o.MyelinTunnel},
		{"myelin_nomasq", MapKindRouting, o.MyelinNomasq},
		{"myelin_snat", MapKindNAT, o.MyelinSnat},
		{"myelin_snat_over", MapKindNAT, o.MyelinSnatOver},
		{"myelin_ipcache", MapKindPolicy, o.MyelinIpcache},
		{"myelin_host_addrs", MapKindPolicy, o.MyelinHostAddrs},
		{"myelin_policy_eps", MapKindPolicy, o.MyelinPolicyEps},
		{"myelin_policy", MapKindPolicy, o.MyelinPolicy},
		{"myelin_policy_ct_over", MapKindPolicy, o.MyelinPolicyCtOver},
		{"myelin_frags", MapKindFragments, o.MyelinFrags},
		{"myelin_flow_state", MapKindFlows, o.MyelinFlowState},
	}
	if d.cfg.LoadBalancing {
		maps = append(maps, []struct {
			name, kind string
			m          *ebpf.Map
		}{
			{"myelin_nodeport_syn", MapKindNAT, o.MyelinNodeportSyn},
			{"myelin_nodeport_nat", MapKindNAT, o.MyelinNodeportNat},
			{"myelin_nodeport_udp", MapKindNAT, o.MyelinNodeportUdp},
			{"myelin_lb_services", MapKindServices, o.MyelinLbServices},
			{"myelin_lb_backends", MapKindServices, o.MyelinLbBackends},
			{"myelin_lb_slots", MapKindServices, o.MyelinLbSlots},
			{"myelin_lb_affinity", MapKindServices, o.MyelinLbAffinity},
			{"myelin_lb_ct", MapKindConntrack, o.MyelinLbCt},
			{"myelin_lb_ct_over", MapKindConntrack, o.MyelinLbCtOver},
			{"myelin_lb_ct_nodeport", MapKindConntrack, o.MyelinLbCtNodeport},
			{"myelin_lb_ct_nodeport_syn", MapKindConntrack, o.MyelinLbCtNodeportSyn},
		}...)
	}
	out := make([]MapStat, 0, len(maps)+1)
	// myelin_policy_ct is an array of connection slots: its entries are the
	// slots in use.
	ct := MapStat{Name: "myelin_policy_ct", Kind: MapKindConntrack}
	ct.Err = d.withPolicyCT(func(t *policyCTTable) error {
		ct.Entries, ct.Max = t.used(), t.slots()
		return nil
	})
	out = append(out, ct)
	for _, m := range maps {
		n, err := countEntries(m.m)
		if err != nil {
			err = fmt.Errorf("count %s: %w", m.name, err)
		}
		out = append(out, MapStat{Name: m.name, Kind: m.kind, Entries: n, Max: int(m.m.MaxEntries()), Err: err})
	}
	return out
}

// AttachErrors counts the program attachments (uplink, VXLAN device, pod veths)
// that failed since Load.
func (d *Datapath) AttachErrors() uint64 { return d.attachErrors.Load() }
