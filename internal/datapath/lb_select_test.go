package datapath

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// testTable is a Maglev table of the test size: backend at every index in at, else other.
func testTable(size int, other uint32, at map[int]uint32) []uint32 {
	t := make([]uint32, size)
	for i := range t {
		t[i] = other
		if id, ok := at[i]; ok {
			t[i] = id
		}
	}
	return t
}

// backendOf runs p through from_pod, sent by pod A, and returns the address it was DNATed to.
func backendOf(d *Datapath, p pkt) (netip.Addr, error) {
	if err := d.UpsertEndpoint(mustAddr(podA), podASender); err != nil {
		return netip.Addr{}, err
	}
	_, out, err := runPacket(d.objs.MyelinFromPod, p.build(), ctxPodA)
	if err != nil {
		return netip.Addr{}, err
	}
	addr, _ := dstOf(out)
	return addr, nil
}

const testMaglevSize = 251

// Maglev: the table decides, and the same tuple always gets the same backend.
func TestPrivilegedLBMaglev(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, testMaglevSize)
	all2 := testTable(testMaglevSize, 2, nil)
	st := lbState{backends: lbBackends, services: map[Frontend]Service{feTCP: {ID: 1, Backends: []uint32{1, 2}, Maglev: all2}}}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	tcp := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	for port := uint16(40000); port < 40016; port++ {
		got, err := backendOf(d, tcp.withSrc(podA, port))
		if err != nil {
			t.Fatal(err)
		}
		if got != backendRemote.Addr {
			t.Fatalf("source port %d went to %v, want %v: the table holds only backend 2", port, got, backendRemote.Addr)
		}
	}

	alternating := make([]uint32, testMaglevSize)
	for i := range alternating {
		alternating[i] = uint32(1 + i%2)
	}
	if err := d.UpsertService(feTCP, Service{ID: 1, Backends: []uint32{1, 2}, Maglev: alternating}); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for port := uint16(40000); port < 40032; port++ {
		p := tcp.withSrc(podA, port)
		var first netip.Addr
		for round := 0; round < 3; round++ {
			if err := clearCT(d); err != nil {
				t.Fatal(err)
			}
			got, err := backendOf(d, p)
			if err != nil {
				t.Fatal(err)
			}
			if round > 0 && got != first {
				t.Fatalf("source port %d: backend %v, then %v: Maglev must be deterministic", port, first, got)
			}
			first = got
		}
		seen[first] = true
	}
	if len(seen) != 2 {
		t.Errorf("32 flows over an alternating table used backends %v, want both", seen)
	}
}

// Two services with identical tables share one inner map; deleting one
// leaves the other working; a different table gets its own.
func TestPrivilegedLBMaglevDedupe(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, testMaglevSize)
	all2 := testTable(testMaglevSize, 2, nil)
	other := Frontend{Addr: mustAddr("10.96.0.11"), Port: 80, Proto: protoTCP}
	st := lbState{backends: lbBackends, services: map[Frontend]Service{
		feTCP: {ID: 1, Backends: []uint32{1, 2}, Maglev: all2},
		other: {ID: 2, Backends: []uint32{2, 1}, Maglev: all2},
	}}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	inner := func(id uint32) (uint32, error) {
		var mapID uint32
		err := d.objs.MyelinLbMaglev.Lookup(id, &mapID)
		return mapID, err
	}
	a, errA := inner(1)
	b, errB := inner(2)
	if errA != nil || errB != nil || a != b || d.maglev.count() != 1 {
		t.Fatalf("inner maps of identical tables: %d (%v), %d (%v), %d held; want one shared", a, errA, b, errB, d.maglev.count())
	}
	if err := d.DeleteService(feTCP); err != nil {
		t.Fatal(err)
	}
	if _, err := inner(1); err == nil {
		t.Error("deleted service still has a Maglev table")
	}
	if got, err := backendOf(d, ipv4(protoTCP, podA, "10.96.0.11").withDst("10.96.0.11", 80)); err != nil || got != backendRemote.Addr {
		t.Errorf("remaining service: backend %v (%v), want %v", got, err, backendRemote.Addr)
	}
	if err := d.UpsertService(feTCP, Service{ID: 1, Backends: []uint32{1}, Maglev: testTable(testMaglevSize, 1, nil)}); err != nil {
		t.Fatal(err)
	}
	a, _ = inner(1)
	b, _ = inner(2)
	if a == b || d.maglev.count() != 2 {
		t.Errorf("different tables share inner map %d (%d held)", a, d.maglev.count())
	}
	// Back to random: the table goes, and the last reference frees it.
	if err := d.UpsertService(other, Service{ID: 2, Backends: []uint32{2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := inner(2); err == nil || d.maglev.count() != 1 {
		t.Errorf("service without table still has one (%v), %d held", err, d.maglev.count())
	}
	svcs, err := d.Services()
	if err != nil || len(svcs) != 2 || !svcs[0].HasMaglev || svcs[1].HasMaglev {
		t.Errorf("Services() = %+v, %v; want %v with a table, %v without", svcs, err, feTCP, other)
	}
}

// ClientIP affinity: new connections of a client stick to its backend
// while the entry is fresh and its backend still in place.
func TestPrivilegedLBAffinity(t *testing.T) {
	requirePrivileged(t)
	t.Run("random", func(t *testing.T) {
		d := loadLB(t, HostRoutingBPF, 0)
		st := lbState{backends: lbBackends, services: map[Frontend]Service{
			feTCP: {ID: 1, Flags: ServiceAffinity, AffinityTimeout: time.Hour, Backends: []uint32{1, 2}}}}
		if err := seedLB(d, st); err != nil {
			t.Fatal(err)
		}
		if err := sameBackend(d, 16, netip.Addr{}); err != nil {
			t.Error(err)
		}
	})
	// With Maglev the choice without affinity is known: backend 2 only at
	// index 0 of the table, which the tested flows do not hash to.
	d := loadLB(t, HostRoutingBPF, testMaglevSize)
	st := lbState{backends: lbBackends, services: map[Frontend]Service{feTCP: {ID: 1, Flags: ServiceAffinity,
		AffinityTimeout: time.Minute, Backends: []uint32{1, 2}, Maglev: testTable(testMaglevSize, 1, map[int]uint32{0: 2})}}}
	for _, c := range []struct {
		name     string
		lastUsed time.Duration
		index    uint32
		want     netip.Addr
	}{
		{"fresh entry", MonotonicNow() - time.Second, 0, backendRemote.Addr},
		// Another CPU's refresh, or an older version's precise clock,
		// can leave a stamp ahead of the programs' read: fresh, not
		// expired by an age that wrapped (bpf/lib/clock.h).
		{"entry stamped ahead of the clock", MonotonicNow() + time.Hour, 0, backendRemote.Addr},
		{"expired entry", MonotonicNow() - 2*time.Minute, 0, backendB.Addr},
		{"backend no longer at its index", MonotonicNow() - time.Second, 1, backendB.Addr},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := seedLB(d, st); err != nil {
				t.Fatal(err)
			}
			if err := seedAffinity(d, 1, podA, 2, c.index, c.lastUsed); err != nil {
				t.Fatal(err)
			}
			if err := sameBackend(d, 8, c.want); err != nil {
				t.Error(err)
			}
		})
	}
}

// sameBackend opens n connections from pod A (different source ports) to
// feTCP and requires one backend for all (want, if valid).
func sameBackend(d *Datapath, n int, want netip.Addr) error {
	tcp := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	for i := 0; i < n; i++ {
		got, err := backendOf(d, tcp.withSrc(podA, uint16(41000+i)))
		if err != nil {
			return err
		}
		if !want.IsValid() {
			want = got
		}
		if got != want {
			return fmt.Errorf("connection %d went to %v, want %v like the others", i, got, want)
		}
	}
	return nil
}
