package agent

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// countingMaps counts the walks of the ipcache map.
type countingMaps struct {
	*fakePolicyMaps
	walks int
}

func (c *countingMaps) IPCache() (map[netip.Prefix]uint32, error) {
	c.walks++
	return c.fakePolicyMaps.IPCache()
}

// The mirror walks the map once, then follows its own writes; a failed write and a
// resync (forget) make it walk again, which picks up what someone else changed.
func TestIPCacheMirror(t *testing.T) {
	fake := newFakePolicyMaps()
	a, b, c := netip.MustParsePrefix("10.244.1.5/32"), netip.MustParsePrefix("10.244.2.7/32"), netip.MustParsePrefix("10.0.0.0/8")
	fake.cache[a] = 100
	under := &countingMaps{fakePolicyMaps: fake}
	m := &ipcacheMirror{policyMaps: under}
	read := func(want map[netip.Prefix]uint32, walks int) {
		t.Helper()
		got, err := m.IPCache()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) || under.walks != walks {
			t.Errorf("IPCache = %v after %d walks, want %v after %d", got, under.walks, want, walks)
		}
		got[netip.MustParsePrefix("192.0.2.1/32")] = 1 // a copy: the mirror is not changed
	}
	read(map[netip.Prefix]uint32{a: 100}, 1)
	if err := m.SetIPCache(b, 101); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteIPCache(a); err != nil {
		t.Fatal(err)
	}
	read(map[netip.Prefix]uint32{b: 101}, 1)

	fake.failCache = map[netip.Prefix]bool{c: true}
	if err := m.SetIPCache(c, 102); err == nil {
		t.Fatal("the failing write succeeded")
	}
	read(map[netip.Prefix]uint32{b: 101}, 2) // walked again: the write's outcome was unknown

	fake.cache[a] = 100 // someone else wrote the map
	read(map[netip.Prefix]uint32{b: 101}, 2)
	m.forget() // the resync
	read(map[netip.Prefix]uint32{a: 100, b: 101}, 3)
}

// applyPolicy through the mirror leaves the maps as it leaves them without one, over
// a change of identities, and a second apply of the same state writes nothing.
func TestApplyPolicyThroughMirror(t *testing.T) {
	old := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	next := serverState(map[netip.Addr]uint32{podX: 300, podY: 302}, map[uint32][]datapath.PolicyPort{302: tcp80Only})
	direct, mirrored := newFakePolicyMaps(), newFakePolicyMaps()
	m := &ipcacheMirror{policyMaps: mirrored}
	for _, st := range []policy.State{old, next} {
		if _, err := applyPolicy(direct, &purgeJournal{}, st, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := applyPolicy(m, &purgeJournal{}, st, nil, nil); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(direct.cache, mirrored.cache) || !maps.Equal(direct.flags, mirrored.flags) || len(direct.entries) != len(mirrored.entries) {
			t.Errorf("through the mirror: ipcache %v, flags %v, entries %v; directly %v, %v, %v",
				mirrored.cache, mirrored.flags, mirrored.entries, direct.cache, direct.flags, direct.entries)
		}
	}
	if res, err := applyPolicy(m, &purgeJournal{}, next, nil, nil); err != nil || res.writes != 0 {
		t.Errorf("second apply: %d writes, %v; want none", res.writes, err)
	}
}
