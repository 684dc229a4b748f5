package datapath

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's BPF ring buffer layout (kernel/bpf/ringbuf.c): a page with the
// consumer position, writable by the reader; a page with the producer position;
// then the data, mapped twice in a row so a record that wraps around the end
// reads as one slice. Each record starts with an 8-byte header: its length with
// the busy (not yet submitted) and discard bits, and a page offset; records are
// 8-byte aligned.
const (
	ringHeaderSize  = 8
	ringBusyBit     = 1 << 31
	ringDiscardBit  = 1 << 30
	ringLengthMask  = ringDiscardBit - 1
	ringRecordAlign = 8
)

// flowRing consumes the flow ring buffer's records where they lie in its mapped
// pages and publishes the consumer position once per batch. The ringbuf package's
// reader copies each record out under a lock and stores the consumer position
// after every record: a write to the page every program run that reserves a record
// reads, so each record cost a cache line moved between the agent's CPU and the
// datapath's, both ways (docs/observability.md, "What it costs"). One consumer only.
type flowRing struct {
	consPage, prodPage []byte // the mappings (nil for a ring built in memory by a test)
	consPos, prodPos   *uint64
	data               []byte // the data area, twice
	mask               uint64
}

// newFlowRing maps the ring buffer map fd of size data bytes (a power of two).
func newFlowRing(fd, size int) (*flowRing, error) {
	page := os.Getpagesize()
	cons, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the flow ring's consumer page: %w", err)
	}
	prod, err := unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("map the flow ring's data: %w", err)
	}
	r := ringOver(cons, prod[:page], prod[page:], size)
	r.consPage, r.prodPage = cons, prod
	return r, nil
}

// ringOver is the ring of these pages: the consumer position at the start of
// cons, the producer position at the start of prod, size bytes of data twice.
func ringOver(cons, prod, data []byte, size int) *flowRing {
	return &flowRing{
		consPos: (*uint64)(unsafe.Pointer(&cons[0])),
		prodPos: (*uint64)(unsafe.Pointer(&prod[0])),
		data:    data[:2*size],
		mask:    uint64(size) - 1,
	}
}

// size is the ring's data size in bytes.
func (r *flowRing) size() int { return int(r.mask + 1) }

// available is how many bytes of records (submitted or not) the ring holds.
func (r *flowRing) available() uint64 {
	return atomic.LoadUint64(r.prodPos) - atomic.LoadUint64(r.consPos)
}

// consume calls fn with each submitted record in order, at most max, skipping
// discarded ones, until it meets one still being written or fn returns false
// (that record is consumed too), and then publishes the new consumer position
// once. The record's bytes are the ring's own: fn must copy what it keeps before
// it returns. It returns how many records it passed to fn.
func (r *flowRing) consume(max int, fn func(sample []byte) bool) int {
	cons := atomic.LoadUint64(r.consPos) // only this reader writes it
	prod := atomic.LoadUint64(r.prodPos)
	start, n := cons, 0
	for n < max && cons < prod {
		at := cons & r.mask
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[at])))
		if hdr&ringBusyBit != 0 {
			break // reserved, not yet submitted: the records behind it wait too
		}
		length := uint64(hdr & ringLengthMask)
		more := true
		if hdr&ringDiscardBit == 0 {
			more = fn(r.data[at+ringHeaderSize : at+ringHeaderSize+length])
			n++
		}
		cons += (ringHeaderSize + length + ringRecordAlign - 1) &^ (ringRecordAlign - 1)
		if !more {
			break
		}
	}
	if cons != start {
		atomic.StoreUint64(r.consPos, cons)
	}
	return n
}

// close unmaps the ring.
func (r *flowRing) close() error {
	if r.consPage == nil {
		return nil
	}
	err := unix.Munmap(r.prodPage)
	if e := unix.Munmap(r.consPage); err == nil {
		err = e
	}
	r.consPage, r.prodPage = nil, nil
	return err
}
