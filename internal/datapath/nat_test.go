package datapath

import (
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

func TestNATTimeouts(t *testing.T) {
	replied, closing := uint16(myelinNatFlagsNAT_F_REPLIED), uint16(myelinNatFlagsNAT_F_CLOSING)
	for _, c := range []struct {
		proto   uint8
		flags   uint16
		state   string
		timeout time.Duration
	}{
		{protoTCP, 0, "tcp-syn", NATTimeoutTCPSyn},
		{protoTCP, replied, "tcp-established", NATTimeoutTCPEstablished},
		{protoTCP, closing, "tcp-closing", NATTimeoutTCPClosing},
		{protoTCP, replied | closing, "tcp-closing", NATTimeoutTCPClosing},
		{protoUDP, replied, "udp", NATTimeoutUDP},
		{protoICMP, 0, "icmp", NATTimeoutICMP},
	} {
		if got := natState(c.proto, c.flags); got != c.state {
			t.Errorf("natState(%d, %#x) = %q, want %q", c.proto, c.flags, got, c.state)
		}
		if got := natTimeout(c.proto, c.flags); got != c.timeout {
			t.Errorf("natTimeout(%d, %#x) = %v, want %v", c.proto, c.flags, got, c.timeout)
		}
	}
}

// GCNAT removes both entries of flows idle past their state's timeout and
// orphaned entries, and keeps the rest; a flow's age is its fresher entry's.
func TestPrivilegedGCNAT(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 0)
	now := 10 * time.Hour
	type seeded struct {
		f    NATEntry
		idle time.Duration
		keep bool
	}
	flows := []seeded{
		{flow(protoTCP, podA, 1001, 1001, extHost, 443, "tcp-established"), 2*time.Hour + 5*time.Minute, true}, // past a keepalive's 2 h
		{flow(protoTCP, podA, 1002, 1002, extHost, 443, "tcp-established"), NATTimeoutTCPEstablished + time.Minute, false},
		{flow(protoTCP, podA, 1003, 1003, extHost, 443, "tcp-syn"), 59 * time.Second, true},
		{flow(protoTCP, podA, 1004, 1004, extHost, 443, "tcp-syn"), 61 * time.Second, false},
		{flow(protoTCP, podA, 1005, 1005, extHost, 443, "tcp-closing"), 11 * time.Second, false},
		{flow(protoTCP, podA, 1006, 1006, extHost, 443, "tcp-closing"), 5 * time.Second, true},
		{flow(protoUDP, podA, 1007, 1007, extHost, 53, "udp"), 30 * time.Second, true},
		{flow(protoUDP, podA, 1008, 1008, extHost, 53, "udp"), 61 * time.Second, false},
		{flow(protoICMP, podA, 9, 9, extHost, 0, "icmp"), 11 * time.Second, false},
		{flow(protoICMP, podA, 10, 10, extHost, 0, "icmp"), time.Second, true},
	}
	if err := clearNAT(d); err != nil {
		t.Fatal(err)
	}
	var want []NATEntry
	for _, s := range flows {
		fk, fv, rk, rv := natEntriesOf(s.f, testNodeIP, now-s.idle)
		for _, kv := range []struct {
			k myelinNatKey
			v myelinNatEntry
		}{{fk, fv}, {rk, rv}} {
			if err := d.objs.MyelinSnat.Update(kv.k, kv.v, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
		}
		if s.keep {
			want = append(want, s.f)
		}
	}
	// A flow whose reverse entry is stale but whose forward entry is fresh stays.
	split := flow(protoUDP, podA, 1009, 1009, extHost, 53, "udp")
	fk, fv, rk, rv := natEntriesOf(split, testNodeIP, now-time.Hour)
	fv.LastSeen = uint64(now - time.Second)
	for _, kv := range []struct {
		k myelinNatKey
		v myelinNatEntry
	}{{fk, fv}, {rk, rv}} {
		if err := d.objs.MyelinSnat.Update(kv.k, kv.v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, split)
	// An orphaned reverse entry, idle: removed.
	_, _, ok, ov := natEntriesOf(flow(protoUDP, "10.1.0.77", 5, 5, extHost, 53, "udp"), testNodeIP, now-time.Hour)
	if err := d.objs.MyelinSnat.Update(ok, ov, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}

	removed, err := d.GCNAT(now)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2*5+1 {
		t.Errorf("GCNAT removed %d entries, want 11 (five idle flows and an orphan)", removed)
	}
	slices.SortFunc(want, compareNATEntries)
	if err := checkNAT(d, want); err != nil {
		t.Error(err)
	}
	// Nothing left to do at the same time; a time before every entry removes nothing.
	for _, at := range []time.Duration{now, time.Second} {
		if n, err := d.GCNAT(at); err != nil || n != 0 {
			t.Errorf("GCNAT(%v) again = %d, %v; want 0", at, n, err)
		}
	}
}
