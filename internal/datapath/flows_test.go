package datapath

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// nextFlow reads one flow record, or fails with errNoEvent after timeout. Records
// wake no reader (bpf/lib/flows.h): the ring is looked at every millisecond.
func nextFlow(r *FlowReader, timeout time.Duration) (FlowRecord, error) {
	deadline := time.Now().Add(timeout)
	var one [1]FlowRecord
	for {
		n, err := r.drain(one[:])
		if n > 0 || err != nil {
			return one[0], err
		}
		if !time.Now().Before(deadline) {
			return FlowRecord{}, errNoEvent
		}
		time.Sleep(time.Millisecond)
	}
}

// openFlows turns flows on in d and opens a reader on them, closed at the test's end.
func openFlows(t *testing.T, d *Datapath) *FlowReader {
	t.Helper()
	if err := d.SetFlows(true); err != nil {
		t.Fatal(err)
	}
	r, err := d.NewFlowReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestPrivilegedBPFFlows: with flows on, a SYN, a FIN, a drop, the first
// packet of a UDP flow and a DNS packet each make one record; an established
// ACK and the UDP flow's second packet make none; with flows off nothing does.
func TestPrivilegedBPFFlows(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	r, err := d.NewFlowReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tcp := ipv4(protoTCP, "10.1.0.10", "10.1.0.20")
	udp := ipv4(protoUDP, "10.1.0.10", "10.1.0.20")
	dnsQuery := ipv4(protoUDP, "10.1.0.10", "10.1.0.20").withDst("10.1.0.20", 53)
	run := func(in []byte) {
		t.Helper()
		if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in, Context: *ctxPodA}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, check func(FlowRecord) bool) {
		t.Helper()
		fr, err := nextFlow(r, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: no flow record: %v", what, err)
		}
		if !check(fr) {
			t.Errorf("%s: record %+v", what, fr)
		}
	}
	expectNone := func(what string) {
		t.Helper()
		if fr, err := nextFlow(r, 100*time.Millisecond); err == nil {
			t.Errorf("%s: unexpected flow record %+v", what, fr)
		}
	}

	run(tcp.build())
	expectNone("flows off")
	if err := d.SetFlows(true); err != nil {
		t.Fatal(err)
	}
	run(tcp.build())
	expect("SYN", func(fr FlowRecord) bool {
		return fr.Kind == FlowTCP && fr.TCPFlags == 0x02 && fr.Direction == "from-pod" && fr.Reason == "FORWARDED" &&
			fr.Src == mustAddr("10.1.0.10") && fr.Dst == mustAddr("10.1.0.20") && fr.SrcPort == 40000 && fr.DstPort == 8080
	})
	run(tcp.withTCPFlags(0x10).build())
	expectNone("established ACK")
	run(tcp.withTCPFlags(0x11).build())
	expect("FIN", func(fr FlowRecord) bool { return fr.Kind == FlowTCP && fr.TCPFlags == 0x11 })
	good := udp.build()
	run(good[:len(good)-4])
	expect("drop", func(fr FlowRecord) bool { return fr.Kind == FlowDrop && fr.Reason == "DROP_INVALID_PACKET" })
	run(udp.build())
	expect("first UDP packet", func(fr FlowRecord) bool { return fr.Kind == FlowNew && fr.Proto == protoUDP && fr.DstPort == 8080 })
	run(udp.build())
	expectNone("second UDP packet")
	run(dnsQuery.build())
	expect("DNS", func(fr FlowRecord) bool {
		return fr.Kind == FlowDNS && fr.DstPort == 53 && string(fr.Payload) == string(dnsQuery.payload)
	})
}

// TestPrivilegedFlowReaderRead: Read, which the agent's flow loop calls, returns a
// record the datapath writes while it waits (at the next poll: records wake no reader
// until a quarter of the ring is used), and returns os.ErrClosed once the reader is
// closed while it waits.
func TestPrivilegedFlowReaderRead(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	r := openFlows(t, d)
	type result struct {
		fr  FlowRecord
		err error
	}
	got := make(chan result)
	read := func() {
		fr, err := r.Read()
		got <- result{fr, err}
	}
	go read()
	time.Sleep(2 * flowPoll) // Read is waiting: the ring was drained at least twice
	in := ipv4(protoTCP, "10.1.0.10", "10.1.0.20").build()
	if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in, Context: *ctxPodA}); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil || res.fr.Kind != FlowTCP || res.fr.TCPFlags != 0x02 || res.fr.DstPort != 8080 {
		t.Fatalf("Read = %+v, %v; want the SYN's record", res.fr, res.err)
	}
	go read()
	time.Sleep(2 * flowPoll)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if res := <-got; !errors.Is(res.err, os.ErrClosed) {
		t.Errorf("Read after Close = %+v, %v; want os.ErrClosed", res.fr, res.err)
	}
}

// TestPrivilegedFlowReaderReadBatch: ReadBatch takes the records already in the ring
// with the first one, no more than the batch holds; the rest come with the next
// call, in the order they were written.
func TestPrivilegedFlowReaderReadBatch(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	r := openFlows(t, d)
	for sport := uint16(40001); sport <= 40003; sport++ {
		p := ipv4(protoTCP, "10.1.0.10", "10.1.0.20").withSrc("10.1.0.10", sport)
		if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: p.build(), Context: *ctxPodA}); err != nil {
			t.Fatal(err)
		}
	}
	batch := make([]FlowRecord, 2)
	var got []uint16
	for _, want := range []int{2, 1} {
		n, err := r.ReadBatch(batch)
		if err != nil || n != want {
			t.Fatalf("ReadBatch = %d, %v; want %d records", n, err, want)
		}
		for _, fr := range batch[:n] {
			got = append(got, fr.SrcPort)
		}
	}
	if len(got) != 3 || got[0] != 40001 || got[1] != 40002 || got[2] != 40003 {
		t.Errorf("source ports %v, want the three SYNs' 40001, 40002, 40003 in order", got)
	}
}

// TestPrivilegedFlowReaderCloseWhileReading: Close from another goroutine while the
// reader drains a ring the datapath keeps writing (and while it waits) ends its
// ReadBatch with os.ErrClosed, never a fault on the unmapped ring; a second Close
// does nothing.
func TestPrivilegedFlowReaderCloseWhileReading(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	if err := d.SetFlows(true); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	written := make(chan error, 1)
	go func() { // SYNs, each a record
		p := ipv4(protoTCP, "10.1.0.10", "10.1.0.20").build()
		for {
			select {
			case <-stop:
				written <- nil
				return
			default:
			}
			if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: p, Context: *ctxPodA}); err != nil {
				written <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-written; err != nil {
			t.Error(err)
		}
	}()
	for i := range 20 {
		r, err := d.NewFlowReader()
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			batch := make([]FlowRecord, 8)
			for {
				if _, err := r.ReadBatch(batch); err != nil {
					read <- err
					return
				}
			}
		}()
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if err := r.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		if err := <-read; !errors.Is(err, os.ErrClosed) {
			t.Fatalf("reader %d after Close: %v, want os.ErrClosed", i, err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}
