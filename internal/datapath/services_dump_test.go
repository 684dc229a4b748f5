package datapath

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// Services reads back, through batch lookups of more than one chunk, every one of
// 10,000 services with its flags, affinity and backends in slot order.
func TestPrivilegedServicesDumpMany(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedLB(d, lbState{backends: map[uint32]Backend{1: backendB, 2: backendRemote, 3: {Addr: mustAddr("10.1.0.30"), Port: 9090}}}); err != nil {
		t.Fatal(err)
	}
	const n = 10000
	want := map[Frontend]Service{}
	for i := 0; i < n; i++ {
		fe := Frontend{Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, Proto: protoTCP}
		s := Service{ID: uint32(i + 1), Backends: [][]uint32{{1, 2, 3}, {3, 1}, nil}[i%3]}
		if i%7 == 0 {
			s.Flags, s.AffinityTimeout = ServiceAffinity, time.Duration(i+1)*time.Second
		}
		if err := d.UpsertService(fe, s); err != nil {
			t.Fatal(err)
		}
		want[fe] = s
	}
	got, err := d.Services()
	if err != nil || len(got) != n {
		t.Fatalf("Services() = %d entries, %v; want %d", len(got), err, n)
	}
	for i, e := range got {
		w := want[e.Frontend]
		if e.ID != w.ID || e.Flags != w.Flags || e.AffinityTimeout != w.AffinityTimeout || !slices.Equal(e.Backends, w.Backends) {
			t.Fatalf("Services()[%d] = %+v, want %+v", i, e, w)
		}
		if i > 0 && got[i-1].Addr.Compare(e.Addr) >= 0 {
			t.Fatalf("Services() not ordered at %d: %v after %v", i, e.Frontend, got[i-1].Frontend)
		}
	}
}
