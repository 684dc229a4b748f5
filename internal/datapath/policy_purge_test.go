package datapath

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// Forgetting one end of a tracked connection never brings back a bit the
// datapath has cleared since the map was listed: when a SYN from the low
// end restarted the entry (only its own bit) after the agent listed it with
// both bits, purging the low end leaves no bit at all, not the high end's
// old one (which would let the high end pass the new connection's
// established packets without judging them). Without such a race, only
// the named end's bit goes; an entry already gone stays gone.
func TestPrivilegedPolicyCTPurgeNoStaleBit(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	lo, hi := mustAddr("10.1.0.10"), mustAddr("10.1.0.20")
	k := myelinPolicyCtKey{AddrLo: addrU32(lo.As4()), AddrHi: addrU32(hi.As4()), PortLo: 6001, PortHi: 8080, Proto: protoTCP}
	purgeLo := PolicyCTPurge{Endpoints: map[netip.Addr]bool{lo: true}}
	both := policyCTEndLo | policyCTEndHi
	for _, c := range []struct {
		name        string
		listed, now uint32 // 0: no entry
		want        uint32 // 0: no entry
		wantChanged bool
	}{
		{"both ends noted, low end purged: the high end's bit stays", both, both, policyCTEndHi, true},
		{"restarted by a SYN of the low end after listing: no stale high bit", both, policyCTEndLo, 0, true},
		{"restarted by a SYN of the high end after listing: its new bit stays", both, policyCTEndHi, policyCTEndHi, false},
		{"gone after listing: stays gone", both, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if policyCTMatches(k, c.listed, purgeLo) == 0 {
				t.Fatalf("listed ends %#x do not match the purge", c.listed)
			}
			_ = d.objs.MyelinPolicyCt.Delete(&k)
			if c.now != 0 {
				if err := d.objs.MyelinPolicyCt.Put(&k, myelinPolicyCtEntry{Ends: c.now}); err != nil {
					t.Fatal(err)
				}
			}
			changed, err := d.forgetPolicyCTEnds(k, purgeLo)
			if err != nil {
				t.Fatal(err)
			}
			if changed != c.wantChanged {
				t.Errorf("changed = %v, want %v", changed, c.wantChanged)
			}
			var v myelinPolicyCtEntry
			err = d.objs.MyelinPolicyCt.Lookup(&k, &v)
			switch {
			case c.want == 0 && !errors.Is(err, ebpf.ErrKeyNotExist):
				t.Errorf("entry has ends %#x (lookup: %v), want no entry", v.Ends, err)
			case c.want != 0 && (err != nil || v.Ends != c.want):
				t.Errorf("entry ends %#x (lookup: %v), want %#x", v.Ends, err, c.want)
			}
		})
	}
	// Through the whole pass: a listed entry with both bits loses only the named one.
	if err := d.objs.MyelinPolicyCt.Put(&k, myelinPolicyCtEntry{Ends: both}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.PurgePolicyCT(purgeLo); err != nil || n != 1 {
		t.Fatalf("PurgePolicyCT = %d, %v; want 1 entry changed", n, err)
	}
	var v myelinPolicyCtEntry
	if err := d.objs.MyelinPolicyCt.Lookup(&k, &v); err != nil || v.Ends != policyCTEndHi {
		t.Errorf("after the pass: ends %#x (lookup: %v), want the high end's %#x", v.Ends, err, policyCTEndHi)
	}
}

// A UDP connection that keeps one end after a purge keeps its last seen, which
// GCPolicyCT reads (a last seen of 0 would never be collected); a TCP connection's
// kept end starts its close afresh.
func TestPrivilegedPolicyCTPurgeKeepsLastSeen(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	lo, hi := mustAddr("10.1.0.10"), mustAddr("10.1.0.20")
	purgeLo := PolicyCTPurge{Endpoints: map[netip.Addr]bool{lo: true}}
	const seen = 12345
	for _, c := range []struct {
		proto uint8
		want  uint32
	}{{protoUDP, seen}, {protoTCP, 0}} {
		k := myelinPolicyCtKey{AddrLo: addrU32(lo.As4()), AddrHi: addrU32(hi.As4()), PortLo: 5353, PortHi: 53, Proto: c.proto}
		if err := d.objs.MyelinPolicyCt.Put(&k, myelinPolicyCtEntry{Ends: policyCTEndLo | policyCTEndHi, FinLo: seen}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.forgetPolicyCTEnds(k, purgeLo); err != nil {
			t.Fatal(err)
		}
		var v myelinPolicyCtEntry
		if err := d.objs.MyelinPolicyCt.Lookup(&k, &v); err != nil || v.Ends != policyCTEndHi || v.FinLo != c.want {
			t.Errorf("proto %d after the low end's purge: entry %+v (lookup: %v), want the high end with fin_lo %d", c.proto, v, err, c.want)
		}
	}
}
