package datapath

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// keyWalkAttempts is how many times countKeys walks a map whose walk restarted
// past its capacity before it reports ebpf.ErrIterationAborted.
const keyWalkAttempts = 3

// countEntries counts m's entries. It reads them dumpChunk at a time with
// BPF_MAP_LOOKUP_BATCH (kernel 5.6+; hash and LRU maps), one syscall per chunk
// instead of two per entry, and walks the keys with BPF_MAP_GET_NEXT_KEY where the
// kernel or the map type (LPM tries) has no batch lookup.
//
// The batch walk of a hash map goes bucket by bucket, so entries deleted or evicted
// meanwhile (LRU churn, GC) never restart it: an entry present throughout is
// counted once. A key walk restarts from the first key when its cursor key is
// deleted between two calls, so it may count entries twice, and under churn
// count past the capacity (cilium/ebpf's MapIterator then ends in
// ErrIterationAborted); countKeys tries again a few times. Key walks are for the
// LPM tries, which only the agent writes. On an error the count is those entries
// counted before it. Not for per-CPU maps, whose batch values are not one buffer
// of ValueSize per entry.
func countEntries(m *ebpf.Map) (int, error) {
	n, err := batchCount(m)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return n, err
	}
	cur := make([]byte, m.KeySize())
	first := func() error { return m.NextKey(nil, cur) }
	next := func() error { return m.NextKey(cur, cur) }
	return countKeys(first, next, int(m.MaxEntries()))
}

// batchCount counts m's entries with batch lookups into raw buffers (the
// entries are only counted, never decoded). ebpf.ErrNotSupported when the
// kernel or map type has none, before anything was counted.
func batchCount(m *ebpf.Map) (int, error) {
	n := 0
	err := batchRead(m, rawEntries(m.KeySize()), rawEntries(m.ValueSize()), func(got int) { n += got })
	return n, err
}

// rawEntries is a buffer of dumpChunk entries of size bytes each, as a slice
// of byte arrays: cilium/ebpf reads into it without copying or decoding.
func rawEntries(size uint32) any {
	t := reflect.SliceOf(reflect.ArrayOf(int(size), reflect.TypeFor[byte]()))
	return reflect.MakeSlice(t, dumpChunk, dumpChunk).Interface()
}

// countKeys counts keys walking them with first and next (BPF_MAP_GET_NEXT_KEY
// from none, then from the cursor; ebpf.ErrKeyNotExist past the last). A walk
// that counts more than capacity keys has restarted (its cursor key was deleted) and
// is walked again, keyWalkAttempts times in all; the last ends in
// ebpf.ErrIterationAborted with capacity as its count.
func countKeys(first, next func() error, capacity int) (int, error) {
	for range keyWalkAttempts - 1 {
		if n, err := walkKeys(first, next, capacity); !errors.Is(err, ebpf.ErrIterationAborted) {
			return n, err
		}
	}
	return walkKeys(first, next, capacity)
}

func walkKeys(first, next func() error, capacity int) (int, error) {
	n := 0
	err := first()
	for ; err == nil; err = next() {
		if n == capacity {
			return n, fmt.Errorf("walk keys: more than the map's %d: %w", capacity, ebpf.ErrIterationAborted)
		}
		n++
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return n, nil
	}
	return n, fmt.Errorf("walk keys: %w", err)
}

// sumPerCPU reads the per-CPU uint64 counters 0, 1, ... of m, the map named name,
// into dsts in that order, each summed over CPUs.
func sumPerCPU(m *ebpf.Map, name string, dsts ...*uint64) error {
	for i, dst := range dsts {
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	return nil
}
