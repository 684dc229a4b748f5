package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// fakePolicyMaps is the datapath's policy maps in memory; after every write
// it checks the invariant of applyPolicy with check (if set).
type fakePolicyMaps struct {
	entries map[datapath.PolicyKey][]datapath.PolicyPort
	flags   map[netip.Addr]datapath.PolicyFlags
	cache   map[netip.Prefix]uint32
	max     int // entries the policy map holds; 0 = no limit
	// maxPorts is how many ranges an entry holds (0: no limit).
	maxPorts int
	// failFlags are addresses whose flags write fails; failDelete fails every
	// entry delete.
	failFlags  map[netip.Addr]bool
	failDelete bool
	check      func(*fakePolicyMaps) error
	errs       []error
	purges     []datapath.PolicyCTPurge // every non-empty purge asked for
	// failCache are prefixes whose write fails (a full ipcache).
	failCache map[netip.Prefix]bool
	// cacheMax is how many prefixes the ipcache holds (0: no limit).
	cacheMax int
}

func newFakePolicyMaps() *fakePolicyMaps {
	return &fakePolicyMaps{entries: map[datapath.PolicyKey][]datapath.PolicyPort{},
		flags: map[netip.Addr]datapath.PolicyFlags{}, cache: map[netip.Prefix]uint32{}}
}

func (f *fakePolicyMaps) after() {
	if f.check != nil {
		if err := f.check(f); err != nil {
			f.errs = append(f.errs, err)
		}
	}
}

func (f *fakePolicyMaps) SetPolicy(k datapath.PolicyKey, p []datapath.PolicyPort) error {
	if _, ok := f.entries[k]; !ok && f.max > 0 && len(f.entries) >= f.max {
		return fmt.Errorf("set policy: %w", unix.E2BIG)
	}
	if f.maxPorts > 0 && len(p) > f.maxPorts {
		return fmt.Errorf("set policy: %w", datapath.ErrPolicyPorts)
	}
	f.entries[k] = slices.Clone(p)
	f.after()
	return nil
}
func (f *fakePolicyMaps) DeletePolicy(k datapath.PolicyKey) error {
	if f.failDelete {
		return fmt.Errorf("delete policy: %w", unix.EIO)
	}
	delete(f.entries, k)
	f.after()
	return nil
}
func (f *fakePolicyMaps) Policies() (map[datapath.PolicyKey][]datapath.PolicyPort, error) {
	return maps.Clone(f.entries), nil
}
func (f *fakePolicyMaps) SetPolicyFlags(ip netip.Addr, fl datapath.PolicyFlags) error {
	if f.failFlags[ip] {
		return fmt.Errorf("set policy flags of %s: %w", ip, unix.EIO)
	}
	if fl == 0 {
		delete(f.flags, ip)
	} else {
		f.flags[ip] = fl
	}
	f.after()
	return nil
}
func (f *fakePolicyMaps) PolicyFlagsAll() (map[netip.Addr]datapath.PolicyFlags, error) {
	return maps.Clone(f.flags), nil
}
func (f *fakePolicyMaps) SetIPCache(p netip.Prefix, id uint32) error {
	if _, ok := f.cache[p]; f.failCache[p] || (!ok && f.cacheMax > 0 && len(f.cache) >= f.cacheMax) {
		return fmt.Errorf("set ipcache %s: %w", p, unix.E2BIG)
	}
	f.cache[p] = id
	f.after()
	return nil
}
func (f *fakePolicyMaps) DeleteIPCache(p netip.Prefix) error {
	delete(f.cache, p)
	f.after()
	return nil
}
func (f *fakePolicyMaps) IPCache() (map[netip.Prefix]uint32, error) { return maps.Clone(f.cache), nil }
func (f *fakePolicyMaps) PurgePolicyCT(p datapath.PolicyCTPurge) (int, error) {
	if !p.Empty() {
		f.purges = append(f.purges, p)
	}
	return 0, nil
}

// allows is what the datapath would decide for a new connection from peer
// address src into local pod dst on TCP port (ingress only).
func (f *fakePolicyMaps) allows(src, dst netip.Addr, port uint16) bool {
	fl := f.flags[dst]
	if fl&datapath.PolicyIngress == 0 {
		return true
	}
	id, ok := f.cache[netip.PrefixFrom(src, 32)]
	if !ok {
		id = datapath.IdentityWorld
	}
	for _, ident := range []uint32{id, datapath.IdentityAny} {
		for _, p := range f.entries[datapath.PolicyKey{Endpoint: dst, Identity: ident}] {
			if p.Proto == 0 || (p.Proto == policy.ProtoTCP && port >= p.Lo && port <= p.Hi) {
				return true
			}
		}
	}
	return false
}

var (
	podX = netip.MustParseAddr("10.244.0.10") // local, the server
	podY = netip.MustParseAddr("10.244.1.10") // remote client
)

func serverState(ids map[netip.Addr]uint32, allowed map[uint32][]datapath.PolicyPort) policy.State {
	st := policy.State{IPCache: map[netip.Prefix]uint32{}, Endpoints: map[netip.Addr]*policy.Endpoint{}}
	for ip, id := range ids {
		st.IPCache[netip.PrefixFrom(ip, 32)] = id
	}
	ep := &policy.Endpoint{Pod: "x/server", IP: podX, Flags: datapath.PolicyIngress, Entries: map[policy.Key][]datapath.PolicyPort{}}
	for id, ports := range allowed {
		ep.Entries[policy.Key{Identity: id}] = ports
	}
	st.Endpoints[podX] = ep
	return st
}

var tcp80Only = []datapath.PolicyPort{{Proto: policy.ProtoTCP, Lo: 80, Hi: 80}}

// A client whose identity changes (a label change) and stays allowed is
// never denied between two writes of the apply.
func TestApplyPolicyNoDenyWindow(t *testing.T) {
	m := newFakePolicyMaps()
	old := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, old, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !m.allows(podY, podX, 80) || m.allows(podY, podX, 81) {
		t.Fatal("after the first apply: want y allowed on 80 only")
	}
	m.check = func(f *fakePolicyMaps) error {
		if !f.allows(podY, podX, 80) {
			return fmt.Errorf("y denied on 80 in between (cache %v, entries %v)", f.cache, f.entries)
		}
		return nil
	}
	next := serverState(map[netip.Addr]uint32{podX: 300, podY: 302}, map[uint32][]datapath.PolicyPort{302: tcp80Only})
	res, err := applyPolicy(m, &purgeJournal{}, next, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.errs {
		t.Error(e)
	}
	if _, stale := m.entries[datapath.PolicyKey{Endpoint: podX, Identity: 301}]; stale || res.writes == 0 {
		t.Errorf("entries %v after %d writes: want the old identity's entry gone", m.entries, res.writes)
	}
	// Applying the same state again writes nothing (a restarted agent).
	if res, err := applyPolicy(m, &purgeJournal{}, next, nil, nil); err != nil || res.writes != 0 {
		t.Errorf("re-apply: %d writes, %v; want none", res.writes, err)
	}
}

// A pod becoming isolated is never briefly isolated without its allows,
// and stale entries of its address do not allow anything.
func TestApplyPolicyNewlyIsolated(t *testing.T) {
	m := newFakePolicyMaps()
	m.entries[datapath.PolicyKey{Endpoint: podX, Identity: 999}] = []datapath.PolicyPort{{}} // a previous pod's
	m.check = func(f *fakePolicyMaps) error {
		if f.flags[podX] != 0 && !f.allows(podY, podX, 80) {
			return fmt.Errorf("isolated before its allows were written")
		}
		if _, stale := f.entries[datapath.PolicyKey{Endpoint: podX, Identity: 999}]; stale && f.flags[podX] != 0 {
			return fmt.Errorf("isolated while a stale entry exists")
		}
		return nil
	}
	st := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	// before (the seeding of open connections) runs ahead of every write,
	// with the flags the maps held: none for x yet.
	var beforeSaw map[netip.Addr]datapath.PolicyFlags
	before := func(cur map[netip.Addr]datapath.PolicyFlags) {
		if len(m.entries) != 1 || len(m.cache) != 0 {
			t.Errorf("before called after writes: entries %v, cache %v", m.entries, m.cache)
		}
		beforeSaw = maps.Clone(cur)
	}
	if _, err := applyPolicy(m, &purgeJournal{}, st, nil, before); err != nil {
		t.Fatal(err)
	}
	for _, e := range m.errs {
		t.Error(e)
	}
	if m.flags[podX] != datapath.PolicyIngress {
		t.Errorf("flags %v, want ingress isolated", m.flags)
	}
	if beforeSaw == nil || beforeSaw[podX] != 0 {
		t.Errorf("before saw flags %v, want called with x not isolated", beforeSaw)
	}
}

// A full policy map fails closed: the pod is isolated and marked
// incomplete, never left open.
func TestApplyPolicyMapFullFailsClosed(t *testing.T) {
	m := newFakePolicyMaps()
	m.max = 1
	st := serverState(map[netip.Addr]uint32{podX: 300, podY: 301},
		map[uint32][]datapath.PolicyPort{301: tcp80Only, 302: tcp80Only})
	res, _ := applyPolicy(m, &purgeJournal{}, st, nil, nil)
	if m.flags[podX] != datapath.PolicyIngress|datapath.PolicyIngressIncomplete {
		t.Errorf("flags %v, want ingress isolated and incomplete", m.flags)
	}
	if len(res.failed[podX]) != 1 || len(st.Endpoints[podX].Problems) != 1 {
		t.Errorf("failed %v problems %v: want the full map reported once", res.failed, st.Endpoints[podX].Problems)
	}
	// A pod no longer isolated loses its flags and entries.
	if _, err := applyPolicy(m, &purgeJournal{}, policy.State{IPCache: st.IPCache}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(m.flags) != 0 || len(m.entries) != 0 {
		t.Errorf("flags %v entries %v: want nothing left", m.flags, m.entries)
	}
}

// Entries a full map refused are problems of every policy isolating the pod.
func TestApplyProblemsNamePolicies(t *testing.T) {
	m := newFakePolicyMaps()
	m.max = 1
	st := serverState(map[netip.Addr]uint32{podX: 300, podY: 301},
		map[uint32][]datapath.PolicyPort{301: tcp80Only, 302: tcp80Only})
	st.Endpoints[podX].IngressPolicies = []string{"x/one", "x/two"}
	res, _ := applyPolicy(m, &purgeJournal{}, st, nil, nil)
	got := applyProblems(st, res)
	if len(got) != 2 || got[0].Policy != "x/one" || got[1].Policy != "x/two" {
		t.Errorf("problems %v, want one for x/one and one for x/two", got)
	}
}

// Tracked connections are forgotten when they may no longer be allowed: the
// endpoint's policy narrowed, or a peer's address left the ipcache or
// changed identity (a reused IP); a pure widening forgets nothing.
func TestApplyPolicyPurgesTrackedConnections(t *testing.T) {
	podZ := netip.MustParseAddr("10.244.1.11")
	m := newFakePolicyMaps()
	base := serverState(map[netip.Addr]uint32{podX: 300, podY: 301, podZ: 303}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, base, nil, nil); err != nil {
		t.Fatal(err)
	}
	m.purges = nil
	wider := serverState(map[netip.Addr]uint32{podX: 300, podY: 301, podZ: 303},
		map[uint32][]datapath.PolicyPort{301: tcp80Only, 303: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, wider, nil, nil); err != nil || len(m.purges) != 0 {
		t.Fatalf("widening: purges %v, err %v; want none", m.purges, err)
	}
	if _, err := applyPolicy(m, &purgeJournal{}, base, nil, nil); err != nil || len(m.purges) != 1 || !m.purges[0].Endpoints[podX] {
		t.Fatalf("narrowing: purges %v, err %v; want x's connections forgotten", m.purges, err)
	}
	m.purges = nil
	gone := serverState(map[netip.Addr]uint32{podX: 300, podZ: 303}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, gone, nil, nil); err != nil || len(m.purges) != 1 || !m.purges[0].Peers[podY] || m.purges[0].Endpoints[podX] {
		t.Fatalf("peer removed: purges %v, err %v; want y's connections forgotten, x's policy unchanged", m.purges, err)
	}
	if want := map[netip.Addr]bool{podY: true}; !maps.Equal(m.purges[0].Gone, want) {
		t.Errorf("peer removed: gone %v, want %v (y pays for no connection any more)", m.purges[0].Gone, want)
	}
	m.purges = nil
	relabeled := serverState(map[netip.Addr]uint32{podX: 300, podZ: 305}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{}, relabeled, nil, nil); err != nil || len(m.purges) != 1 || !m.purges[0].Peers[podZ] || len(m.purges[0].Gone) != 0 {
		t.Fatalf("peer's identity changed: purges %v, err %v; want z's connections forgotten, z not gone", m.purges, err)
	}
	m.purges = nil
	gone = relabeled
	cidr := netip.MustParsePrefix("203.0.113.0/28")
	gone.IPCache[cidr] = 304
	if _, err := applyPolicy(m, &purgeJournal{}, gone, nil, nil); err != nil || len(m.purges) != 1 || !slices.Contains(m.purges[0].Prefixes, cidr) {
		t.Fatalf("new CIDR: purges %v, err %v; want its addresses' connections forgotten", m.purges, err)
	}
}

// An ipBlock's except that can't be written never leaves the ipBlock's
// CIDR to allow it: the CIDR holding it is removed (its addresses are
// world, denied) and the apply reports both.
func TestApplyPolicyIPCacheFailureFailsClosed(t *testing.T) {
	cidr, except := netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("203.0.113.8/29")
	m := newFakePolicyMaps()
	m.failCache = map[netip.Prefix]bool{except: true}
	st := serverState(map[netip.Addr]uint32{podX: 300}, map[uint32][]datapath.PolicyPort{310: tcp80Only})
	st.IPCache[cidr], st.IPCache[except] = 310, 311
	_, err := applyPolicy(m, &purgeJournal{}, st, nil, nil)
	if _, ok := m.cache[cidr]; ok || err == nil {
		t.Fatalf("cache %v, err %v: want the CIDR holding the failed except removed and an error", m.cache, err)
	}
	if m.cache[netip.PrefixFrom(podX, 32)] != 300 {
		t.Errorf("cache %v: prefixes not holding the failed one stay written", m.cache)
	}
	m.failCache = nil
	if _, err := applyPolicy(m, &purgeJournal{}, st, nil, nil); err != nil || m.cache[cidr] != 310 || m.cache[except] != 311 {
		t.Errorf("cache %v, err %v: want both written once the map has room", m.cache, err)
	}
}

// A tenant replacing its policy CIDRs makes the ipcache hold the old and the
// new ones between the writes and the removals; a pod /32 that did not fit then
// is written once the old are gone, in the same apply.
func TestApplyPolicyIPCacheFullDuringReplace(t *testing.T) {
	m := newFakePolicyMaps()
	old := serverState(map[netip.Addr]uint32{podX: 300}, nil)
	for i := range 4 {
		old.IPCache[netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(16 * i)}), 28)] = 310
	}
	if _, err := applyPolicy(m, &purgeJournal{}, old, nil, nil); err != nil {
		t.Fatal(err)
	}
	m.cacheMax = len(m.cache) + 1
	next := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, nil)
	for i := range 4 {
		next.IPCache[netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(16 * i)}), 28)] = 311
	}
	if _, err := applyPolicy(m, &purgeJournal{}, next, nil, nil); err != nil {
		t.Fatalf("err %v: want the writes that did not fit made after the removals", err)
	}
	if !maps.Equal(m.cache, next.IPCache) {
		t.Errorf("cache %v, want %v", m.cache, next.IPCache)
	}
}

// orderedIPCache records the order of ipcache writes.
type orderedIPCache struct {
	*fakePolicyMaps
	written []netip.Prefix
}

func (o *orderedIPCache) SetIPCache(p netip.Prefix, id uint32) error {
	o.written = append(o.written, p)
	return o.fakePolicyMaps.SetIPCache(p, id)
}

// setIPCache writes only what changed, and of that the shortest prefix first: an
// ipBlock before its except, so the except's addresses never carry the block's
// identity for longer than between two writes in the same apply.
func TestSetIPCacheWritesChangesShortestFirst(t *testing.T) {
	pfx := netip.MustParsePrefix
	m := &orderedIPCache{fakePolicyMaps: newFakePolicyMaps()}
	cur := map[netip.Prefix]uint32{pfx("10.244.1.5/32"): 100, pfx("10.244.1.6/32"): 101}
	want := map[netip.Prefix]uint32{
		pfx("10.244.1.5/32"): 100, // unchanged: not written
		pfx("10.244.1.6/32"): 102, // a new identity
		pfx("192.0.2.7/32"):  3,   // an except inside the block below
		pfx("192.0.2.0/24"):  4,
		pfx("0.0.0.0/0"):     5,
	}
	var res policyApplied
	if errs := setIPCache(m, want, cur, &res); len(errs) > 0 {
		t.Fatal(errs)
	}
	wantOrder := []netip.Prefix{pfx("0.0.0.0/0"), pfx("192.0.2.0/24"), pfx("10.244.1.6/32"), pfx("192.0.2.7/32")}
	if !slices.Equal(m.written, wantOrder) || res.writes != len(wantOrder) {
		t.Errorf("wrote %v (%d writes counted), want %v: the changed prefixes, shortest first", m.written, res.writes, wantOrder)
	}
}

// BenchmarkSetIPCacheOneChange: one pod's identity changes among 50,000.
func BenchmarkSetIPCacheOneChange(b *testing.B) {
	want := map[netip.Prefix]uint32{}
	for i := range 50000 {
		want[netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), 32)] = uint32(256 + i%500)
	}
	cur := maps.Clone(want)
	cur[netip.MustParsePrefix("10.244.0.7/32")] = 1
	m := newFakePolicyMaps()
	for b.Loop() {
		var res policyApplied
		setIPCache(m, want, cur, &res)
	}
}
