package datapath

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// lbPortWords is myelin_lb_ports' size: one bit per port (bpf/lib/maps.h).
const lbPortWords = 65536 / 32

// markBackendPorts sets the bits of ports (network order, as the datapath
// reads them) in myelin_lb_ports: packets entering a pod from a port without
// one skip the reply conntrack lookup (ct_reply_to_pod), so a backend's port is
// marked before the backend is written, and no bit is ever cleared (a stale
// bit only costs that lookup). d.ports mirrors the map (seedBackendPorts reads
// it at load); only words that change are written.
func (d *Datapath) markBackendPorts(ports ...uint16) error {
	d.portsMu.Lock()
	defer d.portsMu.Unlock()
	words := map[uint32]uint32{}
	for _, p := range ports {
		i := uint32(p) / 32
		w, ok := words[i]
		if !ok {
			w = d.ports[i]
		}
		words[i] = w | 1<<(uint32(p)%32)
	}
	for i, w := range words {
		if w == d.ports[i] {
			continue
		}
		if err := d.objs.MyelinLbPorts.Update(i, w, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("mark backend ports in myelin_lb_ports: %w", err)
		}
		d.ports[i] = w
	}
	return nil
}

// seedBackendPorts reads myelin_lb_ports into d.ports and marks the port of
// every backend, at every load: an older agent (before a rollback was rolled
// forward) may have written backends without marking them. When this load
// created the bitmap (an upgrade from a datapath without it), also the port of
// every reverse entry left in myelin_lb_ct, so a flow whose backend is gone
// still gets its replies translated.
func (d *Datapath) seedBackendPorts(created bool) error {
	d.portsMu.Lock()
	err := dumpEntries(d.objs.MyelinLbPorts, func(i, w uint32) {
		if i < lbPortWords {
			d.ports[i] = w
		}
	})
	d.portsMu.Unlock()
	if err != nil {
		return fmt.Errorf("read myelin_lb_ports: %w", err)
	}
	var ports []uint16
	err = dumpEntries(d.objs.MyelinLbBackends, func(_ uint32, b myelinLbBackend) { ports = append(ports, b.Port) })
	if err != nil {
		return fmt.Errorf("seed myelin_lb_ports from the backends: %w", err)
	}
	if created {
		err := dumpEntries(d.objs.MyelinLbCt, func(k myelinCtKey, _ myelinCtEntry) {
			if k.Dir == uint8(myelinCtDirCT_DIR_REVERSE) {
				ports = append(ports, k.Sport)
			}
		})
		if err != nil {
			return fmt.Errorf("seed myelin_lb_ports from myelin_lb_ct: %w", err)
		}
	}
	return d.markBackendPorts(ports...)
}
