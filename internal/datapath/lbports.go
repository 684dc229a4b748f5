package datapath

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// lbPortWords is the size of the port bitmaps myelin_lb_ports and
// myelin_lb_nodeports: one bit per port (bpf/lib/maps.h).
const lbPortWords = 65536 / 32

// portBitmap is one of the datapath's port bitmaps, bit p (network order, as
// the programs read ports) in word p/32, and the agent's copy its writes go
// through. A bit spares the programs a hash lookup for ports without it, so
// bits are set before what needs them is written and never cleared (a stale
// bit only costs that lookup); only words that change are written.
type portBitmap struct {
	name  string // the map's, for errors
	m     *ebpf.Map
	mu    sync.Mutex
	words [lbPortWords]uint32
}

// init names the bitmap's map and reads it into the copy.
func (b *portBitmap) init(name string, m *ebpf.Map) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.name, b.m = name, m
	err := dumpEntries(m, func(i, w uint32) {
		if i < lbPortWords {
			b.words[i] = w
		}
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// mark sets the bits of ports (network order).
func (b *portBitmap) mark(ports ...uint16) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	words := map[uint32]uint32{}
	for _, p := range ports {
		i := uint32(p) / 32
		w, ok := words[i]
		if !ok {
			w = b.words[i]
		}
		words[i] = w | 1<<(uint32(p)%32)
	}
	for i, w := range words {
		if w == b.words[i] {
			continue
		}
		if err := b.m.Update(i, w, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("mark ports in %s: %w", b.name, err)
		}
		b.words[i] = w
	}
	return nil
}

// seedPortBitmaps reads both bitmaps and marks, at every load, what the maps
// already hold: an older agent (before a rollback was rolled forward) may have
// written backends or NodePort frontends without marking them.
//
// myelin_lb_ports has the port of every backend: packets entering a pod from a
// port without one skip the reply conntrack lookup (ct_reply_to_pod), and so do
// pods' packets to outside the cluster (a local backend's reply to a NodePort
// client, lb_from_pod). When this load created it (an upgrade from a datapath
// without it), also the port of every reverse entry left in myelin_lb_ct and
// the NodePort tables, so a flow whose backend is gone still gets its replies
// translated.
//
// myelin_lb_nodeports has the port of every NodePort frontend: packets to the
// node's IP at a port without one skip the service lookup (lb_from_netdev).
func (d *Datapath) seedPortBitmaps(created []string) error {
	if err := d.backendPorts.init("myelin_lb_ports", d.objs.MyelinLbPorts); err != nil {
		return err
	}
	if err := d.nodePorts.init("myelin_lb_nodeports", d.objs.MyelinLbNodeports); err != nil {
		return err
	}
	var ports []uint16
	err := dumpEntries(d.objs.MyelinLbBackends, func(_ uint32, b myelinLbBackend) { ports = append(ports, b.Port) })
	if err != nil {
		return fmt.Errorf("seed myelin_lb_ports from the backends: %w", err)
	}
	if slices.Contains(created, "myelin_lb_ports") {
		for name, m := range map[string]*ebpf.Map{"myelin_lb_ct": d.objs.MyelinLbCt, "myelin_lb_ct_nodeport": d.objs.MyelinLbCtNodeport,
			"myelin_lb_ct_nodeport_syn": d.objs.MyelinLbCtNodeportSyn} {
			err := dumpEntries(m, func(k myelinCtKey, _ myelinCtEntry) {
				if k.Dir == uint8(myelinCtDirCT_DIR_REVERSE) {
					ports = append(ports, k.Sport)
				}
			})
			if err != nil {
				return fmt.Errorf("seed myelin_lb_ports from %s: %w", name, err)
			}
		}
	}
	if err := d.backendPorts.mark(ports...); err != nil {
		return err
	}
	var nodePorts []uint16
	err = dumpEntries(d.objs.MyelinLbServices, func(k myelinLbSvcKey, v myelinLbSvc) {
		if v.Flags&uint8(ServiceNodePort) != 0 {
			nodePorts = append(nodePorts, k.Port)
		}
	})
	if err != nil {
		return fmt.Errorf("seed myelin_lb_nodeports from the services: %w", err)
	}
	return d.nodePorts.mark(nodePorts...)
}
