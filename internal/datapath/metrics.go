package datapath

import (
	"fmt"
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

// MapFill reports the fill of the maps that can run full (the endpoints
// map). Counting walks the map, so call it for status, not per packet.
func (d *Datapath) MapFill() ([]MapFill, error) {
	m := d.objs.MyelinEndpoints
	var (
		key   [4]byte
		value myelinEndpointInfo
		n     int
	)
	it := m.Iterate()
	for it.Next(&key, &value) {
		n++
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("count myelin_endpoints: %w", err)
	}
	return []MapFill{{Name: "myelin_endpoints", Entries: n, Max: int(m.MaxEntries())}}, nil
}
