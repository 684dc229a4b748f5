package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// FlowKind is the kind of a datapath flow record (bpf/lib/flows.h).
type FlowKind string

// The flow record kinds.
const (
	FlowTCP     FlowKind = "tcp"     // a TCP packet with SYN, FIN or RST
	FlowNew     FlowKind = "new"     // the first packet of a UDP/ICMP/other flow
	FlowSummary FlowKind = "summary" // packets and bytes of a UDP/ICMP/other flow since its last record
	FlowDrop    FlowKind = "drop"    // a dropped packet
	FlowDNS     FlowKind = "dns"     // a UDP/53 packet with the start of its payload
)

// FlowRecord is one record of the datapath's flow ring buffer.
type FlowRecord struct {
	// Time is when the datapath wrote it (boot-time clock converted to wall time).
	Time time.Time
	Kind FlowKind
	// Reason is a ReasonName (FORWARDED, PASS_STACK or a drop); Direction a DirectionName.
	Reason, Direction string
	IfIndex           int
	Src, Dst          netip.Addr // zero for packets dropped before their IPv4 header was read
	Proto             uint8
	// SrcPort and DstPort for TCP/UDP; for ICMP, SrcPort is type<<8 | code.
	SrcPort, DstPort uint16
	// Service is the frontend the packet was addressed to before translation, if any.
	Service  netip.AddrPort
	TCPFlags uint8
	Len      uint32
	// Packets and Bytes: a FlowSummary's counts since the flow's last record.
	Packets, Bytes uint64
	// Payload: a FlowDNS record's UDP payload, up to 256 bytes.
	Payload []byte
}

// ErrFlowRecord is a record the reader could not decode; the next one may be fine.
var ErrFlowRecord = errors.New("bad flow record")

// SetFlows turns flow records on or off (flows_enabled in the programs' .bss).
func (d *Datapath) SetFlows(on bool) error {
	return setFlag(d.objs.FlowsEnabled, "flows_enabled", on)
}

// flowPoll is how often the reader looks at the rings: the datapath wakes it only once
// a quarter of a ring is used (bpf/lib/flows.h), so a record waits at most this long.
const flowPoll = 100 * time.Millisecond

// bootRefresh is how old the reader's reading of the boot time may get. bootTime is
// a clock_gettime system call (~300 ns here, a third of the agent's whole cost per
// record when read for each), and any system call the reader makes after a quiet
// spell wakes the runtime's sysmon into polling every 20 µs (see FlowReader.wait).
// The boot time moves only as the wall clock is adjusted, so a record's time is off
// by at most that adjustment since the last reading.
const bootRefresh = time.Second

// bootClock hands out the boot time, read again (read) once its reading is
// bootRefresh old.
type bootClock struct {
	read func() time.Time
	t    time.Time // the last reading
	at   time.Time // when it was made
}

// get returns the boot time at now, reading it first when it is stale.
func (c *bootClock) get(now time.Time) time.Time {
	if c.t.IsZero() || now.Sub(c.at) >= bootRefresh {
		c.t, c.at = c.read(), now
	}
	return c.t
}

// FlowReader reads the flow ring buffers: drop records come through a ring of their
// own (myelin_flow_drops), the others through myelin_flows (bpf/lib/flows.h). One
// reader per datapath.
type FlowReader struct {
	// rings are the rings' pages, drops first: records are decoded where they lie.
	rings [2]*flowRing
	boot  bootClock
	// ready is an epoll instance watching both rings' maps, in Go's network poller,
	// where the reader waits between drains (wait).
	ready     *os.File
	readyConn syscall.RawConn
	// mu is held while the reader reads the rings' pages (drain), so that Close,
	// from another goroutine, unmaps them only after that.
	mu     sync.Mutex
	closed atomic.Bool // set under mu
	// bad is a record ReadBatch could not decode after others: its error, returned
	// by the next ReadBatch.
	bad error
}

// NewFlowReader opens a reader on the flow ring buffers.
func (d *Datapath) NewFlowReader() (*FlowReader, error) {
	r := &FlowReader{boot: bootClock{read: bootTime}}
	maps := [2]*ebpf.Map{d.objs.MyelinFlowDrops, d.objs.MyelinFlows}
	fds := make([]int, 0, len(maps))
	for i, m := range maps {
		rb, err := newFlowRing(m.FD(), int(m.MaxEntries()))
		if err != nil {
			r.closeRings()
			return nil, fmt.Errorf("open flows reader: %w", err)
		}
		r.rings[i] = rb
		fds = append(fds, m.FD())
	}
	ready, conn, err := pollableSet(fds, "flow rings")
	if err != nil {
		r.closeRings()
		return nil, fmt.Errorf("open flows reader: %w", err)
	}
	r.ready, r.readyConn = ready, conn
	return r, nil
}

// pollableSet returns an epoll instance watching fds for input, non-blocking, in Go's
// network poller: it is readable once any of them is.
func pollableSet(fds []int, name string) (*os.File, syscall.RawConn, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: epoll: %w", name, err)
	}
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(ep)
			return nil, nil, fmt.Errorf("%s: epoll: %w", name, err)
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	f := os.NewFile(uintptr(ep), name)
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, conn, nil
}

// closeRings unmaps the rings' pages.
func (r *FlowReader) closeRings() error {
	var errs []error
	for i, rb := range r.rings {
		if rb != nil {
			errs = append(errs, rb.close())
			r.rings[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Read blocks until the next record. After Close it returns an error wrapping
// os.ErrClosed.
func (r *FlowReader) Read() (FlowRecord, error) {
	var one [1]FlowRecord
	if _, err := r.ReadBatch(one[:]); err != nil {
		return FlowRecord{}, err
	}
	return one[0], nil
}

// ReadBatch blocks until the next record, then fills recs with it and with the
// records already in the ring behind it (at most len(recs)) and returns how many it
// filled: the agent stores them under one lock. A record that does not decode
// comes back alone, as an error wrapping ErrFlowRecord (n = 0), after the records
// before it. After Close it returns an error wrapping os.ErrClosed.
func (r *FlowReader) ReadBatch(recs []FlowRecord) (int, error) {
	if err := r.bad; err != nil {
		r.bad = nil
		return 0, err
	}
	for {
		n, err := r.drain(recs)
		if n > 0 || err != nil {
			return n, err
		}
		if err := r.wait(); err != nil {
			return 0, err
		}
	}
}

// drain fills recs with the records the rings hold now (at most len(recs)), drops
// first, and returns how many, decoded where they lie in the rings' pages; each
// ring's consumer position moves once for all of them (flowRing). It makes no system
// call: after a quiet spell one would wake sysmon (see wait).
func (r *FlowReader) drain(recs []FlowRecord) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return 0, fmt.Errorf("read flow record: %w", os.ErrClosed)
	}
	if r.rings[0].available() == 0 && r.rings[1].available() == 0 {
		return 0, nil
	}
	boot := r.boot.get(time.Now())
	n := 0
	var bad error
	for _, rb := range r.rings {
		if bad != nil || n == len(recs) {
			break
		}
		rb.consume(len(recs)-n, func(sample []byte) bool {
			if err := recs[n].Decode(sample, boot); err != nil {
				bad = fmt.Errorf("read flow record: %w: %w", ErrFlowRecord, err)
				return false
			}
			n++
			return true
		})
	}
	if bad != nil {
		if n == 0 {
			return 0, bad
		}
		r.bad = bad // for the next call
	}
	return n, nil
}

// wait returns once the datapath wakes readers (a quarter of a ring is used,
// bpf/lib/flows.h) or after flowPoll. It waits in Go's network poller, not in a
// blocking epoll_wait as the ringbuf package's reader does: a goroutine blocked in a
// system call holds its P, the runtime's sysmon takes it back after 10 ms and then
// polls every 20 µs again, which under a TCP_CRR load cost the agent half as much
// CPU as its reading (docs/observability.md).
func (r *FlowReader) wait() error {
	waited := false
	err := r.ready.SetReadDeadline(time.Now().Add(flowPoll))
	if err == nil {
		err = r.readyConn.Read(func(uintptr) bool {
			// Runs only while r.ready is open: Close closes it (and waits for this)
			// before it unmaps the rings. Checked before each wait: a wakeup that
			// came while the reader was draining was cleared when this Read began.
			if waited || r.quarterFull() {
				return true
			}
			waited = true
			return false
		})
	}
	switch {
	case err == nil || errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case r.closed.Load(): // the poller says "use of closed file"
		return fmt.Errorf("read flow record: %w", os.ErrClosed)
	}
	return fmt.Errorf("read flow record: %w", err)
}

// quarterFull says whether a ring holds a quarter of its size, when the datapath
// wakes the reader.
func (r *FlowReader) quarterFull() bool {
	for _, rb := range r.rings {
		if rb.available() >= uint64(rb.size()/4) {
			return true
		}
	}
	return false
}

// Close stops the reader and unblocks Read. It may run while another goroutine
// reads; a second Close does nothing.
func (r *FlowReader) Close() error {
	r.mu.Lock() // no drain is reading the ring's pages, and none will
	closed := r.closed.Swap(true)
	r.mu.Unlock()
	if closed {
		return nil
	}
	err := errors.Join(r.ready.Close(), r.closeRings()) // in this order: see wait
	if err != nil {
		return fmt.Errorf("close flows reader: %w", err)
	}
	return nil
}

// bootTime is the wall time at which the monotonic clock bpf_ktime_get_ns reads was 0.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}

var flowKinds = map[myelinFlowKind]FlowKind{
	myelinFlowKindFLOW_TCP: FlowTCP, myelinFlowKindFLOW_NEW: FlowNew, myelinFlowKindFLOW_SUMMARY: FlowSummary,
	myelinFlowKindFLOW_DROP: FlowDrop, myelinFlowKindFLOW_DNS: FlowDNS,
}

// flowKindByCode is flowKinds as an array indexed by the record's kind byte.
var flowKindByCode = byCode(flowKinds)

// DecodeFlowRecord decodes one raw flow ring buffer record (struct flow_record,
// followed for FLOW_DNS by its payload). boot converts the record's ktime. The
// fields are read at their offsets (flowRecordOffsets, checked against the generated
// struct by a test): the agent decodes a record per new connection and side, and
// reflection (binary.Read) cost as much as the rest of the pipeline.
func DecodeFlowRecord(raw []byte, boot time.Time) (FlowRecord, error) {
	var fr FlowRecord
	if err := fr.Decode(raw, boot); err != nil {
		return FlowRecord{}, err
	}
	return fr, nil
}

// Decode is DecodeFlowRecord into fr (overwritten whole, also on an error): the
// reader decodes into its caller's batch, not into a value it copies there (a
// FlowRecord is ~200 bytes, copied per record).
func (fr *FlowRecord) Decode(raw []byte, boot time.Time) error {
	if len(raw) < flowRecordSize {
		*fr = FlowRecord{}
		return fmt.Errorf("decode flow record: %d bytes, want at least %d", len(raw), flowRecordSize)
	}
	o, ne := &flowRecordOffsets, binary.NativeEndian
	kind := flowKindByCode[raw[o.kind]]
	if kind == "" {
		*fr = FlowRecord{}
		return fmt.Errorf("decode flow record: unknown kind %d", raw[o.kind])
	}
	*fr = FlowRecord{
		Time: boot.Add(time.Duration(ne.Uint64(raw[o.ktime:]))), Kind: kind,
		Reason: ReasonName(raw[o.reason]), Direction: DirectionName(raw[o.dir]), IfIndex: int(ne.Uint32(raw[o.ifindex:])),
		Proto: raw[o.proto], SrcPort: binary.BigEndian.Uint16(raw[o.sport:]), DstPort: binary.BigEndian.Uint16(raw[o.dport:]),
		TCPFlags: raw[o.tcpFlags], Len: ne.Uint32(raw[o.len:]), Packets: ne.Uint64(raw[o.packets:]), Bytes: ne.Uint64(raw[o.bytes:]),
	}
	saddr, daddr := [4]byte(raw[o.saddr:o.saddr+4]), [4]byte(raw[o.daddr:o.daddr+4])
	if saddr != [4]byte{} || daddr != [4]byte{} {
		fr.Src, fr.Dst = netip.AddrFrom4(saddr), netip.AddrFrom4(daddr)
	}
	if svc := [4]byte(raw[o.svcAddr : o.svcAddr+4]); svc != [4]byte{} {
		fr.Service = netip.AddrPortFrom(netip.AddrFrom4(svc), binary.BigEndian.Uint16(raw[o.svcPort:]))
	}
	if kind == FlowDNS {
		n := int(ne.Uint16(raw[o.payloadLen:]))
		if flowRecordSize+n > len(raw) {
			*fr = FlowRecord{}
			return fmt.Errorf("decode flow record: dns payload of %d bytes in a %d byte record", n, len(raw))
		}
		fr.Payload = append([]byte(nil), raw[flowRecordSize:flowRecordSize+n]...)
	}
	return nil
}

// flowRecordSize is struct flow_record's size: a FLOW_DNS payload starts there.
var flowRecordSize = int(unsafe.Sizeof(myelinFlowRecord{}))

// flowRecordOffsets are struct flow_record's fields' offsets (the generated struct's).
var flowRecordOffsets = func() (o struct {
	ktime, packets, bytes, saddr, daddr, svcAddr, ifindex, len  uintptr
	sport, dport, svcPort, payloadLen, kind, reason, dir, proto uintptr
	tcpFlags                                                    uintptr
}) {
	var h myelinFlowRecord
	o.ktime, o.packets, o.bytes = unsafe.Offsetof(h.Ktime), unsafe.Offsetof(h.Packets), unsafe.Offsetof(h.Bytes)
	o.saddr, o.daddr, o.svcAddr = unsafe.Offsetof(h.Saddr), unsafe.Offsetof(h.Daddr), unsafe.Offsetof(h.SvcAddr)
	o.ifindex, o.len, o.sport, o.dport = unsafe.Offsetof(h.Ifindex), unsafe.Offsetof(h.Len), unsafe.Offsetof(h.Sport), unsafe.Offsetof(h.Dport)
	o.svcPort, o.payloadLen, o.kind = unsafe.Offsetof(h.SvcPort), unsafe.Offsetof(h.PayloadLen), unsafe.Offsetof(h.Kind)
	o.reason, o.dir, o.proto, o.tcpFlags = unsafe.Offsetof(h.Reason), unsafe.Offsetof(h.Dir), unsafe.Offsetof(h.Proto), unsafe.Offsetof(h.TcpFlags)
	return o
}()
