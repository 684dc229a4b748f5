package datapath

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Record budgets of bpf/lib/flows.h (flows_allow).
const (
	flowDNSBudget    = 128
	flowDropBudget   = 64
	flowWindowShift  = 30
	flowFloodPackets = 3 * flowDNSBudget
)

// monoWindow is the budget window now, on the programs' clock
// (CLOCK_MONOTONIC_COARSE, bpf/lib/clock.h): read on the same clock, the
// windows the programs saw lie between two readings around their runs.
func monoWindow(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() >> flowWindowShift
}

// drainFlows reads every record in the ring.
func drainFlows(t *testing.T, r *FlowReader) []FlowRecord {
	t.Helper()
	var out []FlowRecord
	for {
		fr, err := nextFlow(r, 300*time.Millisecond)
		if err == errNoEvent {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fr)
	}
}

// flowsOn loads a datapath (BPF host routing) with pods A and B and flows on, and
// opens its flow reader, closed at cleanup. Nobody reads the ring until the test does.
func flowsOn(t *testing.T) (*Datapath, *FlowReader) {
	t.Helper()
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	r, err := d.NewFlowReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := d.SetFlows(true); err != nil {
		t.Fatal(err)
	}
	return d, r
}

// runFromPod runs myelin_from_pod on packet in as ctx says.
func runFromPod(t *testing.T, d *Datapath, in []byte, ctx *skbCtx) {
	t.Helper()
	if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in, Context: *ctx}); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedBPFFlowsLimit: a flood of forged DNS packets (UDP from source port
// 53) and of drops from pod A makes at most one budget of records per window it
// spans, the rest counted as FLOWS_LIMITED, while pod B's DNS packet and drop that
// follow still make their records.
func TestPrivilegedBPFFlowsLimit(t *testing.T) {
	d, r := flowsOn(t)
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	run := func(in []byte, ctx *skbCtx) { t.Helper(); runFromPod(t, d, in, ctx) }
	forged := ipv4(protoUDP, podA, podBIP).withSrc(podA, 53).withDst(podBIP, 40000).build()
	bad := ipv4(protoUDP, podA, podBIP).build()
	bad = bad[:len(bad)-4] // truncated: DROP_INVALID_PACKET
	first := monoWindow(t)
	for range flowFloodPackets {
		run(forged, ctxPodA)
		run(bad, ctxPodA)
	}
	windows := int(monoWindow(t) - first + 1)
	dnsB := fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 40001).withDst(podA, 53))
	run(dnsB.build(), ctxPodB)
	badB := fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 40001)).build()
	run(badB[:len(badB)-4], ctxPodB)

	var dnsA, dropsA, gotDNSB, gotDropB int
	for _, fr := range drainFlows(t, r) {
		switch {
		case fr.Kind == FlowDNS && fr.Src == mustAddr(podA):
			dnsA++
		case fr.Kind == FlowDrop && fr.Src == mustAddr(podA):
			dropsA++
		case fr.Kind == FlowDNS && fr.Src == mustAddr(podBIP) && fr.DstPort == 53:
			gotDNSB++
		case fr.Kind == FlowDrop && fr.Src == mustAddr(podBIP) && fr.Reason == "DROP_INVALID_PACKET":
			gotDropB++
		}
	}
	if dnsA > flowDNSBudget*windows || dnsA == 0 {
		t.Errorf("pod A's %d forged DNS packets made %d records, want 1..%d", flowFloodPackets, dnsA, flowDNSBudget*windows)
	}
	if dropsA > flowDropBudget*windows || dropsA == 0 {
		t.Errorf("pod A's %d drops made %d records, want 1..%d", flowFloodPackets, dropsA, flowDropBudget*windows)
	}
	if gotDNSB != 1 || gotDropB != 1 {
		t.Errorf("pod B after the flood: %d DNS records, %d drop records, want 1 each", gotDNSB, gotDropB)
	}
	limited, err := counter(d, "from-pod", "FLOWS_LIMITED")
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(2*flowFloodPackets - dnsA - dropsA); limited.Packets != want {
		t.Errorf("FLOWS_LIMITED = %d, want %d (flood packets without a record)", limited.Packets, want)
	}
	if lost, _ := counter(d, "from-pod", "FLOWS_LOST"); lost.Packets != 0 {
		t.Errorf("FLOWS_LOST = %d, want 0: the budgets keep the ring from filling", lost.Packets)
	}
}

// TestPrivilegedBPFFlowsDropRing: pod A floods new UDP flows, then TCP SYNs (neither
// has a budget) while nobody reads the rings, until records are lost (FLOWS_LOST);
// pod B's drop after that still makes its record: drops have a ring of their own.
func TestPrivilegedBPFFlowsDropRing(t *testing.T) {
	t.Run("udp", func(t *testing.T) { testFlowsDropRing(t, protoUDP) })
	t.Run("tcp", func(t *testing.T) { testFlowsDropRing(t, protoTCP) })
}

func testFlowsDropRing(t *testing.T, proto uint8) {
	d, r := flowsOn(t)
	run := func(in []byte, ctx *skbCtx) { t.Helper(); runFromPod(t, d, in, ctx) }
	// A 1 MiB ring holds fewer than 64,000 records (myelin_flow_state holds
	// 65,536 flows); ports from 1024 (53 would make DNS records).
	lostCount := func() uint64 {
		t.Helper()
		c, err := counter(d, "from-pod", "FLOWS_LOST")
		if err != nil {
			t.Fatal(err)
		}
		return c.Packets
	}
	flood := 0
	var last []byte
	for sport := uint16(1024); sport < 65024 && (flood%64 != 0 || lostCount() == 0); sport++ {
		p := ipv4(proto, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 9)
		if proto == protoTCP {
			p = p.withTCPFlags(tcpSYN)
		}
		last = p.build()
		run(last, ctxPodA)
		flood++
	}
	lost := lostCount()
	if proto == protoUDP {
		// A flow whose record was lost is noted all the same: its next packets lose nothing more.
		run(last, ctxPodA)
		if again := lostCount(); again != lost {
			t.Errorf("a lost flow's next packet: FLOWS_LOST %d -> %d, want it counted once per flow", lost, again)
		}
	}
	badB := fromPodB(ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 40001)).build()
	run(badB[:len(badB)-4], &skbCtx{IngressIfindex: uint32(podB.IfIndex)})

	var floodA, dropB int
	for _, fr := range drainFlows(t, r) {
		switch {
		case (fr.Kind == FlowNew || fr.Kind == FlowTCP) && fr.Src == mustAddr(podA):
			floodA++
		case fr.Kind == FlowDrop && fr.Src == mustAddr(podBIP) && fr.Reason == "DROP_INVALID_PACKET":
			dropB++
		}
	}
	if lost == 0 || uint64(floodA)+lost != uint64(flood) {
		t.Errorf("pod A's %d new flows: %d records, %d lost; want some lost and the rest recorded", flood, floodA, lost)
	}
	if dropB != 1 || lostCount() != lost {
		t.Errorf("pod B's drop after the flood: %d records, FLOWS_LOST %d -> %d; want 1 record, none lost (drops have their own ring)", dropB, lost, lostCount())
	}
}
