package datapath

import "fmt"

// ICMPRejectsSuppressed returns how many ICMP port unreachable answers to
// packets for services without ready backends the datapath left unsent
// because a CPU was over its rate (200 a second, bursts of 100; see
// bpf/lib/icmp.h), summed over CPUs. Those packets are still counted as
// DROP_SVC_NO_BACKEND drops. The counter lives in a pinned map and persists
// across agent restarts.
func (d *Datapath) ICMPRejectsSuppressed() (uint64, error) {
	var perCPU []myelinIcmpRate
	if err := d.objs.MyelinIcmpRate.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("read myelin_icmp_rate: %w", err)
	}
	var n uint64
	for _, b := range perCPU {
		n += b.Suppressed
	}
	return n, nil
}
