package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"
)

// dumpChunk is how many entries one batch lookup asks for.
const dumpChunk = 4096

// batchDump calls fn for every entry of m, read dumpChunk at a time with
// BPF_MAP_LOOKUP_BATCH (kernel 5.6+): a few syscalls for 100,000 entries
// where Iterate makes two per entry. ebpf.ErrNotSupported when the kernel
// or map type has no batch lookup (before anything was passed to fn).
func batchDump[K, V any](m *ebpf.Map, fn func(K, V)) error {
	keys, values := make([]K, dumpChunk), make([]V, dumpChunk)
	return batchRead(m, keys, values, func(n int) {
		for i := range n {
			fn(keys[i], values[i])
		}
	})
}

// batchRead reads m into keys and values (slices of dumpChunk entries) one chunk
// at a time with BPF_MAP_LOOKUP_BATCH, calling got with each chunk's count.
// ebpf.ErrNotSupported as batchDump says.
func batchRead(m *ebpf.Map, keys, values any, got func(n int)) error {
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, values, nil)
		got(n)
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // that was the last chunk
		case err != nil:
			return err
		}
	}
}

// dumpEntries is batchDump, or one Iterate where the kernel has no batch lookup.
func dumpEntries[K, V any](m *ebpf.Map, fn func(K, V)) error {
	err := batchDump(m, fn)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}

// serviceEntry is the ServiceEntry of one myelin_lb_services entry, without
// its backends.
func serviceEntry(k myelinLbSvcKey, v myelinLbSvc) ServiceEntry {
	e := ServiceEntry{
		Frontend:  Frontend{Addr: addrFromNetwork(k.Addr), Port: ntohs(k.Port), Proto: k.Proto},
		Service:   Service{ID: v.Id, Flags: ServiceFlags(v.Flags) & serviceFlagsKnown, LocalBackends: int(v.LocalCount)},
		HasMaglev: v.Flags&uint8(myelinLbSvcFlagsLB_SVC_F_MAGLEV) != 0,
	}
	if e.Flags&ServiceAffinity != 0 {
		e.AffinityTimeout = time.Duration(v.AffinityTimeout) * time.Second
	}
	return e
}

// servicesBatch is Services read with batch lookups: the agent adopts 10,000
// services of 10 backends at start in ~30 syscalls instead of ~130,000.
func (d *Datapath) servicesBatch() ([]ServiceEntry, error) {
	var out []ServiceEntry
	counts := map[uint32]uint32{} // slots per service id
	err := batchDump(d.objs.MyelinLbServices, func(k myelinLbSvcKey, v myelinLbSvc) {
		out = append(out, serviceEntry(k, v))
		counts[v.Id] = v.Count
	})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	slots := make(map[uint32][]uint32, len(counts))
	for id, n := range counts {
		slots[id] = make([]uint32, n)
	}
	var stray int
	err = batchDump(d.objs.MyelinLbSlots, func(k myelinLbSlotKey, backend uint32) {
		if s := slots[k.SvcId]; k.Slot < uint32(len(s)) && backend != 0 {
			s[k.Slot] = backend
		} else {
			stray++ // beyond a service's count, or of no service: not selectable
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list service slots: %w", err)
	}
	for i := range out {
		e := &out[i]
		e.Backends = slots[e.ID]
		if slices.Contains(e.Backends, 0) {
			return nil, fmt.Errorf("list services: %v: a slot below its count %d is missing", e.Frontend, len(e.Backends))
		}
		if len(e.Backends) == 0 {
			e.Backends = nil
		}
	}
	slices.SortFunc(out, func(a, b ServiceEntry) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return out, nil
}
