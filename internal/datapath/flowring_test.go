package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// memRing is a ring buffer laid out in memory as the kernel lays it out, with the
// data area mirrored as the kernel's double mapping shows it.
type memRing struct {
	cons, prod [8]byte
	data       []byte
	size       uint64
	r          *flowRing
}

func newMemRing(size int) *memRing {
	m := &memRing{data: make([]byte, 2*size), size: uint64(size)}
	m.r = ringOver(m.cons[:], m.prod[:], m.data, size)
	return m
}

// put writes a record with header bits flags at the producer position and moves it.
func (m *memRing) put(sample []byte, flags uint32) {
	pos := binary.NativeEndian.Uint64(m.prod[:])
	rec := make([]byte, ringHeaderSize+len(sample))
	binary.NativeEndian.PutUint32(rec, uint32(len(sample))|flags)
	copy(rec[ringHeaderSize:], sample)
	for i, b := range rec {
		at := (pos + uint64(i)) % m.size
		m.data[at], m.data[at+m.size] = b, b
	}
	pos += (uint64(len(rec)) + ringRecordAlign - 1) &^ (ringRecordAlign - 1)
	binary.NativeEndian.PutUint64(m.prod[:], pos)
}

func (m *memRing) consumer() uint64 { return binary.NativeEndian.Uint64(m.cons[:]) }

// collect consumes at most max records, copying them.
func (m *memRing) collect(max int) (got [][]byte) {
	m.r.consume(max, func(s []byte) bool { got = append(got, bytes.Clone(s)); return true })
	return got
}

// The flow ring's consumer: submitted records in order, discarded ones skipped,
// a record still being written stops it (and the ones behind it wait), a record
// that wraps around the end reads whole, and the consumer position ends after the
// last record consumed.
func TestFlowRingConsume(t *testing.T) {
	m := newMemRing(128)
	a, b, c := bytes.Repeat([]byte{1}, 12), bytes.Repeat([]byte{2}, 5), bytes.Repeat([]byte{3}, 16)
	m.put(a, 0)              // 20 bytes, aligned to 24
	m.put(b, ringDiscardBit) // 13 -> 16: at 24
	m.put(c, 0)              // 24 -> 24: at 40
	busy := binary.NativeEndian.Uint64(m.prod[:])
	m.put([]byte{4, 4, 4, 4}, ringBusyBit) // at 64

	if got := m.collect(10); len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], c) {
		t.Fatalf("consumed %v, want a and c (b discarded, the busy record not yet)", got)
	}
	if m.consumer() != busy {
		t.Fatalf("consumer position %d, want %d (the busy record)", m.consumer(), busy)
	}
	if got := m.collect(10); len(got) != 0 {
		t.Fatalf("consumed %v while the record is busy", got)
	}
	// Submitted: clear its busy bit, as bpf_ringbuf_submit does.
	hdr := binary.NativeEndian.Uint32(m.data[busy%m.size:])
	binary.NativeEndian.PutUint32(m.data[busy%m.size:], hdr&^ringBusyBit)
	binary.NativeEndian.PutUint32(m.data[busy%m.size+m.size:], hdr&^ringBusyBit)
	if got := m.collect(10); len(got) != 1 || !bytes.Equal(got[0], []byte{4, 4, 4, 4}) {
		t.Fatalf("consumed %v, want the submitted record", got)
	}

	// A record across the end of the data area (at 80, 49 bytes) reads as one slice.
	long := []byte("a record that crosses the end of the ring")
	m.put(long, 0)
	if got := m.collect(10); len(got) != 1 || !bytes.Equal(got[0], long) {
		t.Fatalf("consumed %q, want %q whole", got, long)
	}
	if m.r.available() != 0 {
		t.Fatalf("%d bytes left after consuming everything", m.r.available())
	}
}

// consume stops at max records, and after a record fn refuses (which is consumed).
func TestFlowRingConsumeStops(t *testing.T) {
	m := newMemRing(256)
	for i := range 5 {
		m.put([]byte{byte(i)}, 0)
	}
	if got := m.collect(2); len(got) != 2 || got[0][0] != 0 || got[1][0] != 1 {
		t.Fatalf("consumed %v, want records 0 and 1", got)
	}
	var seen []byte
	n := m.r.consume(10, func(s []byte) bool { seen = append(seen, s[0]); return s[0] != 2 })
	if n != 1 || !bytes.Equal(seen, []byte{2}) {
		t.Fatalf("consume passed %v (n %d), want record 2 alone", seen, n)
	}
	if got := m.collect(10); len(got) != 2 || got[0][0] != 3 || got[1][0] != 4 {
		t.Fatalf("consumed %v after the refused record, want 3 and 4", got)
	}
}
