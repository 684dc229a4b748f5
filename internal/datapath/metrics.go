package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Metric is one counter row of the datapath, summed over CPUs.
type Metric struct {
	// Direction is a DirectionName, e.g. "from-pod".
	Direction string
	// Reason is a ReasonName, e.g. "FORWARDED" or "DROP_INVALID_PACKET".
	Reason  string
	Packets uint64
	Bytes   uint64
}

// Metrics returns the non-zero counters, ordered by direction then reason.
// Counters live in a pinned map, so they persist across agent restarts.
func (d *Datapath) Metrics() ([]Metric, error) {
	var (
		key    uint32
		perCPU []myelinMetricsValue
		out    []Metric
	)
	reasons := uint32(myelinReasonMETRIC_REASONS)
	it := d.objs.MyelinMetrics.Iterate()
	for it.Next(&key, &perCPU) {
		var m Metric
		for _, v := range perCPU {
			m.Packets += v.Packets
			m.Bytes += v.Bytes
		}
		if m.Packets == 0 && m.Bytes == 0 {
			continue
		}
		m.Direction = DirectionName(uint8(key / reasons))
		m.Reason = ReasonName(uint8(key % reasons))
		out = append(out, m)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// MapFill is how full one map is.
type MapFill struct {
	Name    string
	Entries int
	Max     int
}

// MapFill reports the fill of the maps that can run full: the endpoints
// map, the tunnel map and the NAT map (two entries per masqueraded flow;
// when full, new flows are dropped as DROP_NAT_FULL until GCNAT frees
// room) and, with load balancing, the NodePort SNAT tables
// myelin_nodeport_syn (an LRU: full, new flows evict embryonic ones),
// myelin_nodeport_nat (full: DROP_NODEPORT_NAT_FULL until GCNodePortNAT
// frees room) and myelin_nodeport_udp (an LRU: full, newly answered UDP
// flows evict idle ones). Counting reads the maps (countEntries), so call it for
// status, not per packet.
func (d *Datapath) MapFill() ([]MapFill, error) {
	var (
		endpoints = d.objs.MyelinEndpoints
		tunnels   = d.objs.MyelinTunnel
		nat       = d.objs.MyelinSnat
	)
	nEndpoints, err := countEntries(endpoints)
	if err != nil {
		return nil, fmt.Errorf("count myelin_endpoints: %w", err)
	}
	nTunnels, err := countEntries(tunnels)
	if err != nil {
		return nil, fmt.Errorf("count myelin_tunnel: %w", err)
	}
	nNAT, err := countEntries(nat)
	if err != nil {
		return nil, fmt.Errorf("count myelin_snat: %w", err)
	}
	fills := []MapFill{
		{Name: "myelin_endpoints", Entries: nEndpoints, Max: int(endpoints.MaxEntries())},
		{Name: "myelin_tunnel", Entries: nTunnels, Max: int(tunnels.MaxEntries())},
		{Name: "myelin_snat", Entries: nNAT, Max: int(nat.MaxEntries())},
	}
	if !d.cfg.LoadBalancing {
		return fills, nil
	}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"myelin_nodeport_syn", d.objs.MyelinNodeportSyn}, {"myelin_nodeport_nat", d.objs.MyelinNodeportNat},
		{"myelin_nodeport_udp", d.objs.MyelinNodeportUdp}} {
		n, err := countEntries(m.m)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", m.name, err)
		}
		fills = append(fills, MapFill{Name: m.name, Entries: n, Max: int(m.m.MaxEntries())})
	}
	return fills, nil
}
