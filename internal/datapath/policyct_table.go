package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// myelin_policy_ct's layout (bpf/lib/types.h, lib/policy_ct_table.h): an array of
// buckets of policyCTWays slots, and one more element, the header: its first 8
// bytes hold the bucket hash's seed, the next 4 when a GC round that keeps the
// slots' idle clocks walked it last (policyCTClocksFresh), the next 4 when one
// that keeps their RESET notes did (GCPolicyCT).
const (
	policyCTWays       = 4 // POLICY_CT_WAYS
	policyCTSlotSize   = int(unsafe.Sizeof(myelinPolicyCtSlot{}))
	policyCTBucketSize = policyCTSlotSize * policyCTWays
	policyCTHashMul    = 0x9e3779b97f4a7c15 // POLICY_CT_MUL
	policyCTPairHash   = 0x5bd1e9955bd1e995 // POLICY_CT_PAIR
)

// errNoPolicyCT is what the policy table's walkers return on a Datapath that
// neither Load nor OpenPinned made (a programming error, not a node's state).
var errNoPolicyCT = errors.New("myelin_policy_ct is not open: use a Datapath from Load or OpenPinned")

// policyCTBuckets is the number of buckets of a table of max connections: max
// rounded up to whole buckets, so the table never holds fewer than asked.
func policyCTBuckets(max uint32) uint32 { return (max + policyCTWays - 1) / policyCTWays }

// policyCTBucketsOf is policy_ct_buckets_of: the three buckets of key k in a
// table of buckets buckets hashed with seed, its pair's (of its addresses
// alone) and its own two (of the whole key), in the order a lookup reads them
// (the same one again, at times).
func policyCTBucketsOf(seed uint64, buckets uint32, k myelinPolicyCtKey) [3]uint32 {
	var w [4]uint32
	*(*myelinPolicyCtKey)(unsafe.Pointer(&w)) = k
	h, p := seed, seed^policyCTPairHash
	for _, x := range w[:2] {
		p = (p ^ uint64(x)) * policyCTHashMul
	}
	for _, x := range w {
		h = (h ^ uint64(x)) * policyCTHashMul
	}
	return [3]uint32{uint32(((p >> 32) * uint64(buckets)) >> 32),
		uint32(((h & 0xffffffff) * uint64(buckets)) >> 32), uint32(((h >> 32) * uint64(buckets)) >> 32)}
}

// slotsOf are the indexes of the slots where connection k may live, in the
// order a lookup reads them: its pair's bucket's, then its own two's (each
// bucket once).
func (t *policyCTTable) slotsOf(seed uint64, k myelinPolicyCtKey) []int {
	b := policyCTBucketsOf(seed, t.buckets, k)
	out := make([]int, 0, len(b)*policyCTWays)
	for c, bucket := range b {
		if slices.Contains(b[:c], bucket) {
			continue
		}
		for w := range policyCTWays {
			out = append(out, int(bucket)*policyCTWays+w)
		}
	}
	return out
}

// policyCTTable is the agent's view of myelin_policy_ct, mapped into its
// memory (BPF_F_MMAPABLE) for one walk (Datapath.withPolicyCT): slots are
// read and written under their sequence counts exactly as the programs do
// (lib/policy_ct_table.h, lib/policy_ct_write.h), so a reader never takes half of one write for a whole
// slot, and the agent never writes over a slot a program wrote since the
// agent read it.
type policyCTTable struct {
	mem     []byte
	buckets uint32
}

// mapPolicyCT maps m, a myelin_policy_ct of buckets buckets and its header.
func mapPolicyCT(m *ebpf.Map) (*policyCTTable, error) {
	if m.MaxEntries() < 2 || int(m.ValueSize()) != policyCTBucketSize {
		return nil, fmt.Errorf("map myelin_policy_ct: %d elements of %d bytes, want buckets of %d bytes and a header", m.MaxEntries(), m.ValueSize(), policyCTBucketSize)
	}
	mem, err := unix.Mmap(m.FD(), 0, policyCTMappedSize(m), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map myelin_policy_ct into memory: %w", err)
	}
	return &policyCTTable{mem: mem, buckets: m.MaxEntries() - 1}, nil
}

// policyCTMappedSize is the length of a mapping of m, a myelin_policy_ct:
// its buckets and header, in whole pages.
func policyCTMappedSize(m *ebpf.Map) int {
	page := os.Getpagesize()
	return (int(m.MaxEntries())*policyCTBucketSize + page - 1) / page * page
}

// close unmaps the table.
func (t *policyCTTable) close() error {
	if t == nil || t.mem == nil {
		return nil
	}
	err := unix.Munmap(t.mem)
	t.mem = nil
	return err
}

// slots is the number of connection slots.
func (t *policyCTTable) slots() int { return int(t.buckets) * policyCTWays }

// slot is slot i (0 <= i < slots()).
func (t *policyCTTable) slot(i int) *myelinPolicyCtSlot {
	return (*myelinPolicyCtSlot)(unsafe.Pointer(&t.mem[i*policyCTSlotSize]))
}

// seed is the header's seed word.
func (t *policyCTTable) seed() *uint64 {
	return (*uint64)(unsafe.Pointer(&t.mem[int(t.buckets)*policyCTBucketSize]))
}

// clocks is the header's word that says when a GC round that keeps the slots'
// idle clocks (born, ref's ROUND) walked the table last, in policyCTUnits; 0 in
// a table no such round walked yet.
func (t *policyCTTable) clocks() *uint32 {
	return (*uint32)(unsafe.Pointer(&t.mem[int(t.buckets)*policyCTBucketSize+8]))
}

// resets is the header's word that says when a GC round that keeps the slots'
// RESET notes (sets and clears them: noteRound) walked the table last, in
// policyCTUnits; 0 in a table no such round walked yet. Agents before
// 2026-12-05 20:00 kept a note they did not know but never cleared it.
func (t *policyCTTable) resets() *uint32 {
	return (*uint32)(unsafe.Pointer(&t.mem[int(t.buckets)*policyCTBucketSize+12]))
}

// read copies slot i whole, with the count it had: busy when a writer was at
// it (read it again later). An empty slot has a zero key.
func (t *policyCTTable) read(i int) (k myelinPolicyCtKey, v myelinPolicyCtEntry, seq uint32, busy bool) {
	s := t.slot(i)
	seq = atomic.LoadUint32(&s.Seq)
	k, v = s.Key, s.Entry
	return k, v, seq, seq&1 != 0 || atomic.LoadUint32(&s.Seq) != seq
}

// write changes slot i with fn if its count is still seq (nothing wrote it
// since it was read with that count) and says whether it did. fn may only
// write the key and the entry; the program's in-place writes of a connection's
// close state and last seen may still land meanwhile (lib/policy_ct.h).
func (t *policyCTTable) write(i int, seq uint32, fn func(*myelinPolicyCtSlot)) bool {
	s := t.slot(i)
	if seq&1 != 0 || !atomic.CompareAndSwapUint32(&s.Seq, seq, seq+1) {
		return false
	}
	fn(s)
	atomic.AddUint32(&s.Seq, 1)
	return true
}

// unstick takes over slot i when a writer died holding it at count seq (the
// count was odd at two GC rounds in a row): the count moves on to the next odd
// one (the slot is the agent's now), the slot, half written, is emptied, and
// the count moves on to even. No program reads or writes a slot with an odd
// count, so it allowed nothing and held nothing until it was empty: the dead
// writer's half is never read as a whole slot.
func (t *policyCTTable) unstick(i int, seq uint32) bool {
	s := t.slot(i)
	if seq&1 == 0 || !atomic.CompareAndSwapUint32(&s.Seq, seq, seq+2) {
		return false
	}
	s.Key, s.Entry = myelinPolicyCtKey{}, myelinPolicyCtEntry{}
	atomic.AddUint32(&s.Seq, 1)
	return true
}

// empty empties slot i if its count is still seq.
func (t *policyCTTable) empty(i int, seq uint32) bool {
	return t.write(i, seq, func(s *myelinPolicyCtSlot) {
		s.Key, s.Entry = myelinPolicyCtKey{}, myelinPolicyCtEntry{}
	})
}

// each calls fn with every tracked connection whose slot it could read whole
// (a slot being written at that moment is passed over: it is this instant's
// connection, not one to collect or count).
func (t *policyCTTable) each(fn func(i int, k myelinPolicyCtKey, v myelinPolicyCtEntry, seq uint32)) {
	for i := range t.slots() {
		if k, v, seq, busy := t.read(i); !busy && k.Proto != 0 {
			fn(i, k, v, seq)
		}
	}
}

// used counts the slots that hold a connection.
func (t *policyCTTable) used() int {
	n := 0
	for i := range t.slots() {
		if atomic.LoadUint32(&t.slot(i).Seq)&1 != 0 || t.slot(i).Key.Proto != 0 {
			n++
		}
	}
	return n
}

// find is the slot of connection k, as policy_ct_find looks it up with seed:
// the first copy in the order of its buckets that is not being written (the
// programs take a copy being written for a miss).
func (t *policyCTTable) find(seed uint64, k myelinPolicyCtKey) (i int, v myelinPolicyCtEntry, seq uint32, ok bool) {
	i, v, seq, ok, _ = t.lookup(seed, k)
	return i, v, seq, ok
}

// lookup is find that also says, on a miss, whether a slot of k's buckets was
// being written (it may hold k: a program's first packet of the connection,
// which a copy written elsewhere meanwhile would shadow).
func (t *policyCTTable) lookup(seed uint64, k myelinPolicyCtKey) (i int, v myelinPolicyCtEntry, seq uint32, ok, busy bool) {
	for _, i := range t.slotsOf(seed, k) {
		sk, sv, sseq, b := t.read(i)
		if b {
			busy = true
			continue
		}
		if sk == k {
			return i, sv, sseq, true, false
		}
	}
	return 0, myelinPolicyCtEntry{}, 0, false, busy
}

// pinnedPolicyCTSeed is the seed kept in the header of the myelin_policy_ct
// pinned in pinDir when that table has buckets buckets (Load then reuses it,
// and its programs must hash as the ones attached did), else a new random one.
func pinnedPolicyCTSeed(pinDir string, buckets uint32) (uint64, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "myelin_policy_ct"), nil)
	if err == nil {
		defer m.Close()
		var head myelinPolicyCtBucket
		if m.Type() == ebpf.Array && m.MaxEntries() == buckets+1 && int(m.ValueSize()) == policyCTBucketSize &&
			m.Lookup(buckets, &head) == nil {
			if seed := binary.NativeEndian.Uint64(unsafe.Slice((*byte)(unsafe.Pointer(&head)), 8)); seed != 0 {
				return seed, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("open pinned myelin_policy_ct: %w", err)
	}
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("pick the policy table's hash seed: %w", err)
		}
		if seed := binary.NativeEndian.Uint64(b[:]); seed != 0 {
			return seed, nil
		}
	}
}

// configurePolicyCTSeed sets the programs' policy_ct_seed in spec (sized by
// configure) to the seed of the table pinned in pinDir, or a new one, and
// returns it.
func configurePolicyCTSeed(spec *ebpf.CollectionSpec, pinDir string) (uint64, error) {
	seed, err := pinnedPolicyCTSeed(pinDir, spec.Maps["myelin_policy_ct"].MaxEntries-1)
	if err != nil {
		return 0, err
	}
	if err := spec.Variables["policy_ct_seed"].Set(seed); err != nil {
		return 0, fmt.Errorf("set policy_ct_seed: %w", err)
	}
	return seed, nil
}

// withPolicyCT calls fn with d's myelin_policy_ct mapped into memory and
// unmaps it after. The kernel maps all of an array map's pages at once, so a
// mapping makes the whole table (5.5 MiB at the default policy-ct-max) part of
// the agent's resident memory for as long as it lasts: the agent maps it only
// while it walks it (a GC round, a purge, a count for the metrics).
func (d *Datapath) withPolicyCT(fn func(t *policyCTTable) error) error {
	if d.objs.MyelinPolicyCt == nil {
		return errNoPolicyCT
	}
	t, err := mapPolicyCT(d.objs.MyelinPolicyCt)
	if err != nil {
		return err
	}
	return errors.Join(fn(t), t.close())
}

// openPolicyCT keeps d.policyCTSeed in the loaded myelin_policy_ct's header
// (or checks that the pinned table Load reused holds it).
func (d *Datapath) openPolicyCT() error {
	return d.withPolicyCT(func(t *policyCTTable) error { return t.keepPolicyCTSeed(d.policyCTSeed) })
}

// keepPolicyCTSeed writes seed into the loaded table's header, or checks that
// the header already holds it (the pinned table Load reused).
func (t *policyCTTable) keepPolicyCTSeed(seed uint64) error {
	if atomic.CompareAndSwapUint64(t.seed(), 0, seed) {
		return nil
	}
	if got := atomic.LoadUint64(t.seed()); got != seed {
		return fmt.Errorf("myelin_policy_ct: its header holds seed %#x, the programs were loaded with %#x: remove the pinned map and restart the agent", got, seed)
	}
	return nil
}

// policyCTCarryPlan says whether the connections of m, the pinned
// myelin_policy_ct that ms replaces, can be carried into the new table, and
// how: a table of buckets of the same layout slot by slot; a hash table (the
// layout before 2026-12-05: key policy_ct_key, value policy_ct_entry) entry
// by entry, its values converted by field name when their layout changed.
// Either way each connection is placed anew (its bucket depends on the
// table's size and seed: policyCTCarry).
func policyCTCarryPlan(ms *ebpf.MapSpec, m *ebpf.Map) (carry bool, conv *layoutConv, why string) {
	buckets, ok := btf.UnderlyingType(ms.Value).(*btf.Struct)
	if !ok || len(buckets.Members) != 1 {
		return false, nil, "the new object has no BTF for its buckets"
	}
	ways, ok := btf.UnderlyingType(buckets.Members[0].Type).(*btf.Array)
	if !ok {
		return false, nil, "the new object has no BTF for its slots"
	}
	slot, ok := btf.UnderlyingType(ways.Type).(*btf.Struct)
	if !ok || len(slot.Members) < 2 {
		return false, nil, "the new object has no BTF for its slots"
	}
	switch {
	case m.Type() == ebpf.Array:
		if _, value, err := pinnedTypes(m); err != nil || !sameShape(value, ms.Value) {
			return false, nil, "its buckets' layout changed"
		}
		return true, nil, ""
	case m.Type() == ebpf.Hash || m.Type() == ebpf.LRUHash:
		entry := &ebpf.MapSpec{KeySize: uint32(policyCTKeySize), ValueSize: uint32(policyCTEntrySize),
			Key: slot.Members[0].Type, Value: slot.Members[1].Type}
		if m.KeySize() != entry.KeySize {
			return false, nil, fmt.Sprintf("its keys have %d bytes, not %d", m.KeySize(), entry.KeySize)
		}
		key, value, err := pinnedTypes(m)
		if err != nil {
			if m.ValueSize() == entry.ValueSize {
				return true, nil, "" // no BTF to compare: same sizes, same meaning
			}
			return false, nil, err.Error()
		}
		conv, identity, err := planLayout(key, value, entry)
		if err != nil {
			return false, nil, err.Error()
		}
		if identity && m.ValueSize() == entry.ValueSize {
			conv = nil
		}
		return true, conv, ""
	}
	return false, nil, fmt.Sprintf("its type changed (%s to %s)", m.Type(), ms.Type)
}

const (
	policyCTKeySize   = int(unsafe.Sizeof(myelinPolicyCtKey{}))
	policyCTEntrySize = int(unsafe.Sizeof(myelinPolicyCtEntry{}))
)

// policyCTCarry places the connections of the pinned table at path in to, its
// replacement of buckets hashed with seed, each in an empty slot of its buckets
// (all full: counted lost), and returns r with what was carried.
func policyCTCarry(r MapReplacement, path string, to *ebpf.Map, seed uint64) (MapReplacement, error) {
	from, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return r, fmt.Errorf("open pinned map %s to carry its entries: %w", path, err)
	}
	defer from.Close()
	t, err := mapPolicyCT(to)
	if err != nil {
		return r, err
	}
	defer t.close()
	// The seed goes into the header before the table is pinned: an agent that
	// dies before it opens the table finds the seed its connections were
	// placed with, not a header of 0 that would make it pick another.
	if err := t.keepPolicyCTSeed(seed); err != nil {
		return r, err
	}
	born := policyCTUnits(MonotonicNow()) // carried as new: their age is not known
	place := func(k myelinPolicyCtKey, v myelinPolicyCtEntry) {
		if k.Proto == 0 || v.Ends&(policyCTEnds|policyCTOpened) == 0 {
			return
		}
		if placed, _ := t.place(seed, k, v, born); placed {
			r.Carried++
		} else {
			r.Lost++
		}
	}
	if from.Type() == ebpf.Array {
		old, err := mapPolicyCT(from)
		if err != nil {
			r.CarryErr = err.Error()
			return r, nil
		}
		defer old.close()
		oldSeed := atomic.LoadUint64(old.seed())
		old.each(func(i int, k myelinPolicyCtKey, v myelinPolicyCtEntry, _ uint32) {
			if !old.shadowed(oldSeed, i, k) { // the copy lookups find, not an older one behind it
				place(k, v)
			}
		})
		return r, nil
	}
	key, value := make([]byte, from.KeySize()), make([]byte, from.ValueSize())
	it := from.Iterate()
	for it.Next(key, value) {
		v := value
		if r.conv != nil {
			_, v = r.conv.convert(key, value)
		}
		if len(v) < policyCTEntrySize {
			v = append(v, make([]byte, policyCTEntrySize-len(v))...)
		}
		place(*(*myelinPolicyCtKey)(unsafe.Pointer(&key[0])), *(*myelinPolicyCtEntry)(unsafe.Pointer(&v[0])))
	}
	if err := it.Err(); err != nil {
		r.CarryErr = err.Error() // what was copied stays
	}
	return r, nil
}

// place writes connection k's entry v, born then (policyCTUnits), into the
// first empty slot of its buckets (as hashed with seed; its pair's first) that
// nothing wrote since it was read, marked as a connection that carried traffic
// (its idle timeout is PolicyCTTimeoutTCP). busy: no slot was free, but one was
// in a write (read them again). The carry fills a table no program uses yet
// (what the old table knew of a connection's age is not kept); SeedPolicyCT
// writes beside the programs.
func (t *policyCTTable) place(seed uint64, k myelinPolicyCtKey, v myelinPolicyCtEntry, born uint32) (placed, busy bool) {
	for _, i := range t.slotsOf(seed, k) {
		sk, _, seq, b := t.read(i)
		if b {
			busy = true
			continue
		}
		if sk.Proto == 0 && t.write(i, seq, func(s *myelinPolicyCtSlot) { s.Key, s.Entry, s.Born, s.Ref = k, v, born, policyCTRefRound }) {
			return true, false
		}
	}
	return false, busy
}
