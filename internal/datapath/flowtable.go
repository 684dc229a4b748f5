package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
)

// The datapath's flow tables (myelin_snat, the NodePort SNAT tables, the Service
// conntrack tables) hold each flow as two entries: the forward one, keyed by the
// initiator's tuple, and the reverse one, keyed by the reply's tuple. Both carry
// when the flow was last seen and its state flags, and both go together. A
// flowTable reads such a map into flows and collects the idle ones; the tables
// differ only in their C types and in how an entry names its flow.

// flowValue is the value type of a flow table.
type flowValue interface {
	// seen is when the entry's flow was last seen (on the MonotonicNow clock)
	// and its state flags.
	seen() (lastSeen uint64, flags uint16)
}

func (v myelinNatEntry) seen() (uint64, uint16) { return v.LastSeen, v.Flags }
func (v myelinNpEntry) seen() (uint64, uint16)  { return v.LastSeen, v.Flags }
func (v myelinCtEntry) seen() (uint64, uint16)  { return v.LastSeen, v.Flags }

// flowTable is one flow table with keys K and values V whose flows are told
// apart by ID.
type flowTable[K any, V flowValue, ID comparable] struct {
	name string // the map's name, for errors
	m    *ebpf.Map
	// flowOf is the flow an entry belongs to, the same for both entries, and
	// whether the entry is the forward one.
	flowOf func(K, V) (id ID, forward bool)
	// timeout is how long flow id may stay idle with state flags.
	timeout func(id ID, flags uint16) time.Duration
}

// pairedFlow is both entries of one flow; a key is nil when its entry is
// missing (a lost race, an eviction, an interrupted GC).
type pairedFlow[K any, V any] struct {
	fwd, rev *K
	fwdValue V // the forward entry's value when fwd is set
	lastSeen uint64
	flags    uint16
}

// read reads the table and pairs its entries into flows, with batch lookups
// (dumpEntries): an Iterate walk gives up when the entry it stands on is
// deleted under it, as an LRU flood does all the time.
func (t flowTable[K, V, ID]) read() (map[ID]*pairedFlow[K, V], error) {
	flows := make(map[ID]*pairedFlow[K, V])
	err := dumpEntries(t.m, func(k K, v V) {
		id, forward := t.flowOf(k, v)
		f := flows[id]
		if f == nil {
			f = &pairedFlow[K, V]{}
			flows[id] = f
		}
		key := k
		if forward {
			f.fwd, f.fwdValue = &key, v
		} else {
			f.rev = &key
		}
		last, flags := v.seen()
		f.lastSeen, f.flags = max(f.lastSeen, last), f.flags|flags
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.name, err)
	}
	return flows, nil
}

// gc deletes the entries (both directions) of every flow idle longer than its
// timeout at now, a time on the MonotonicNow clock, and returns how many map
// entries it removed. A flow is re-read just before deletion, so one that saw a
// packet during the walk is kept.
func (t flowTable[K, V, ID]) gc(now time.Duration) (int, error) {
	return t.gcKeeping(now, func(ID, *pairedFlow[K, V]) {})
}

// gcKeeping is gc, with keep called for every flow it leaves.
func (t flowTable[K, V, ID]) gcKeeping(now time.Duration, keep func(ID, *pairedFlow[K, V])) (int, error) {
	return t.deleteWhere(func(id ID, f *pairedFlow[K, V]) bool {
		if t.idle(id, f.lastSeen, f.flags, now) && t.stillIdle(id, f, now) {
			return true
		}
		keep(id, f)
		return false
	})
}

// trimFullPercent is how full a flow table must be after a GC round for
// gcBudget to end the flows of pods over their budget.
const trimFullPercent = 90

// gcBudget is gc with a per-pod budget (budget.go): it returns the flows each pod
// (pod names the one holding flow id) holds after the round, and when the table is
// still at least trimFullPercent full, it ends the flows of every pod holding more
// than budget beyond it, the least recently seen first. The table is a plain hash:
// a pod's flood that filled it within one round would otherwise keep every pod's
// new flows out until the flood's flows idle out. The counts are those before the
// trim, so such a pod is listed over its budget. budget 0: gc alone, no counts.
func (t flowTable[K, V, ID]) gcBudget(now time.Duration, pod func(ID) netip.Addr, budget uint32) (int, podCounts, error) {
	if budget == 0 {
		n, err := t.gc(now)
		return n, nil, err
	}
	type keptFlow struct {
		id ID
		f  *pairedFlow[K, V]
	}
	held, entries := podCounts{}, 0
	var kept []keptFlow
	removed, err := t.gcKeeping(now, func(id ID, f *pairedFlow[K, V]) {
		held.add(pod(id))
		entries += pairedEntries(f)
		kept = append(kept, keptFlow{id, f})
	})
	if err != nil || uint64(entries)*100 < uint64(t.m.MaxEntries())*trimFullPercent {
		return removed, held, err
	}
	excess := held.over(budget)
	for addr, n := range excess {
		excess[addr] = n - budget
	}
	slices.SortFunc(kept, func(a, b keptFlow) int { return cmp.Compare(a.f.lastSeen, b.f.lastSeen) })
	for _, k := range kept {
		addr, ok := podKey(pod(k.id))
		if !ok || excess[addr] == 0 {
			continue
		}
		excess[addr]--
		n, err := t.delete(k.id, k.f)
		removed += n
		if err != nil {
			return removed, held, err
		}
	}
	return removed, held, nil
}

// pairedEntries is how many of its two entries flow f has.
func pairedEntries[K, V any](f *pairedFlow[K, V]) int {
	n := 0
	if f.fwd != nil {
		n++
	}
	if f.rev != nil {
		n++
	}
	return n
}

// deleteFlows deletes the entries (both directions) of every flow whose forward
// entry's value end reports true for, and returns how many map entries it
// removed. A forward entry is re-read just before deletion, so a flow whose
// entry a packet rewrote meanwhile (chose again) is kept.
func (t flowTable[K, V, ID]) deleteFlows(end func(V) bool) (int, error) {
	return t.deleteWhere(func(_ ID, f *pairedFlow[K, V]) bool {
		if f.fwd == nil || !end(f.fwdValue) {
			return false
		}
		var v V
		return t.m.Lookup(f.fwd, &v) == nil && end(v)
	})
}

// deleteWhere reads the table, deletes both entries of every flow doomed says
// so of, and returns how many map entries it removed.
func (t flowTable[K, V, ID]) deleteWhere(doomed func(ID, *pairedFlow[K, V]) bool) (int, error) {
	flows, err := t.read()
	if err != nil {
		return 0, err
	}
	removed := 0
	for id, f := range flows {
		if !doomed(id, f) {
			continue
		}
		n, err := t.delete(id, f)
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// delete deletes both entries of flow id, forward first: a packet meanwhile
// re-creates the flow and finds its own reverse entry still there. It returns
// how many it removed.
func (t flowTable[K, V, ID]) delete(id ID, f *pairedFlow[K, V]) (int, error) {
	removed := 0
	for _, k := range []*K{f.fwd, f.rev} {
		if k == nil {
			continue
		}
		err := t.m.Delete(k)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return removed, fmt.Errorf("delete %s entry of %+v: %w", t.name, id, err)
		}
		if err == nil {
			removed++
		}
	}
	return removed, nil
}

// idle reports whether flow id, last seen at lastSeen with flags, is past its
// timeout at now.
func (t flowTable[K, V, ID]) idle(id ID, lastSeen uint64, flags uint16, now time.Duration) bool {
	last := time.Duration(lastSeen)
	return now > last && now-last > t.timeout(id, flags)
}

// stillIdle re-reads f's entries and reports whether it is still idle.
func (t flowTable[K, V, ID]) stillIdle(id ID, f *pairedFlow[K, V], now time.Duration) bool {
	last, flags := f.lastSeen, f.flags
	for _, k := range []*K{f.fwd, f.rev} {
		var v V
		if k != nil && t.m.Lookup(k, &v) == nil {
			l, fl := v.seen()
			last, flags = max(last, l), flags|fl
		}
	}
	return t.idle(id, last, flags, now)
}
