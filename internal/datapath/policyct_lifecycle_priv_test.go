package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// The hash seed lives with the table: a reload over the pinned table hashes as
// the programs before it did (their connections stay tracked), and a table of
// another size gets a new seed, its connections placed anew.
func TestPrivilegedPolicyCTSeedKept(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	load := func(max uint32) *Datapath { t.Helper(); return loadPolicyCTMax(t, dir, max) }
	d := load(1024)
	seed := d.policyCTSeed
	k := abKey(5000, 9090)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = load(1024)
	if d.policyCTSeed != seed {
		t.Errorf("reload over the pinned table: seed %#x, want its %#x", d.policyCTSeed, seed)
	}
	if _, ok := policyCTGet(d, k); !ok {
		t.Error("reload over the pinned table: its connection is not found")
	}
	d.Close()
	d = load(2048)
	defer d.Close()
	ct := mappedPolicyCT(t, d)
	if d.policyCTSeed == seed || binary.NativeEndian.Uint64(ct.mem[int(ct.buckets)*policyCTBucketSize:]) != d.policyCTSeed {
		t.Errorf("table of another size: seed %#x (before %#x), header %#x: want a new seed in the header",
			d.policyCTSeed, seed, *ct.seed())
	}
	if _, ok := policyCTGet(d, k); !ok {
		t.Error("table of another size: the connection was not placed anew")
	}
}

// An agent upgraded from a release whose table was an LRU hash (key
// policy_ct_key, value policy_ct_entry) keeps every connection it tracked: Load
// replaces the pinned map and places each entry into its bucket of the new table,
// where the programs find it (an ACK its policy alone would deny passes).
func TestPrivilegedPolicyCTFromTheLRUTable(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDirReady(t)
	defer Unpin(dir)
	key, entry := lruPolicyCTTypes(t)
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "myelin_policy_ct", Type: ebpf.LRUHash, KeySize: key.Size, ValueSize: entry.Size,
		MaxEntries: 131072, Key: key, Value: entry})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	k, v := abKey(5000, 9090), myelinPolicyCtEntry{Ends: policyCTEndHi, Closing: 1, FinLo: 77}
	d := loadOverPinned(t, dir, "myelin_policy_ct", old, &k, &v)
	defer d.Close()
	if r := d.ReplacedMaps(); len(r) != 1 || r[0].Name != "myelin_policy_ct" || r[0].Converted() || r[0].Carried != 1 || r[0].Lost != 0 {
		t.Fatalf("load over the LRU table: replaced %+v, want myelin_policy_ct, 1 carried as it was", r)
	}
	if got, ok := policyCTGet(d, k); !ok || got != v {
		t.Fatalf("the carried connection: %+v (found %v), want %+v", got, ok, v)
	}
	if err := errors.Join(seedPolicyKeepingCT(d, bAllowsA8080), seedEndpoints(d, seedAB)); err != nil {
		t.Fatal(err)
	}
	if !toB(t, d, 5000, 9090, false) {
		t.Error("ACK of the carried connection to a port B's policy denies: denied, want tracked")
	}
}

// The agent maps myelin_policy_ct only while it walks it: the kernel maps all
// of an array map's pages at once, so a mapping kept open would add the whole
// table (5.5 MiB at the default size) to the agent's resident memory. After a
// load, a GC round, a purge and a count, no mapping of the table is left.
func TestPrivilegedPolicyCTNotKeptMapped(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, agentDefaultConfig())
	size := policyCTMappedSize(d.objs.MyelinPolicyCt)
	// mappings counts this process's mappings of a BPF map of the table's size.
	mappings := func() int {
		t.Helper()
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(maps), "\n") {
			var start, end uint64
			if strings.HasSuffix(line, "anon_inode:bpf-map") {
				if _, err := fmt.Sscanf(line, "%x-%x", &start, &end); err == nil && int(end-start) == size {
					n++
				}
			}
		}
		return n
	}
	if err := d.withPolicyCT(func(*policyCTTable) error {
		if n := mappings(); n != 1 {
			t.Errorf("while walked: %d mappings of %d bytes, want 1", n, size)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GCPolicyCT(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PurgePolicyCT(PolicyCTPurge{Peers: map[netip.Addr]bool{netip.MustParseAddr("10.244.9.9"): true}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range d.MapStats() {
		if s.Name == "myelin_policy_ct" && (s.Err != nil || s.Max != int(d.objs.MyelinPolicyCt.MaxEntries()-1)*policyCTWays) {
			t.Errorf("MapStats of myelin_policy_ct: %+v", s)
		}
	}
	if n := mappings(); n != 0 {
		t.Errorf("after a load, a GC round, a purge and a count: %d mappings of myelin_policy_ct (%d bytes) left, want 0", n, size)
	}
}

// A table replaced for its size holds the seed its connections were placed with
// in its header as soon as they are carried, before it is pinned: an agent that
// died between the carry and opening the table used to find a header of 0 and
// pick another seed, and every carried connection was lost to its lookups.
func TestPrivilegedPolicyCTCarryKeepsSeed(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	d := loadPolicyCTMax(t, dir, 1024)
	k := abKey(5000, 9090)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	const seed = 0x5eed5eed5eed
	r, ct := carryPolicyCT(t, dir, seed)
	if r.Carried != 1 {
		t.Fatalf("carry = %+v; want 1 connection carried", r)
	}
	if got := *ct.seed(); got != seed {
		t.Errorf("header of the carried table: seed %#x, want %#x", got, seed)
	}
	if _, _, _, ok := ct.find(seed, k); !ok {
		t.Error("carried connection not found with the header's seed")
	}
}

// carryPolicyCT carries the table pinned in dir into a new one of 2,048 slots
// hashed with seed (policyCTCarry, as a changed policy-ct-max does), mapped
// until t ends.
func carryPolicyCT(t *testing.T, dir string, seed uint64) (MapReplacement, *policyCTTable) {
	t.Helper()
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps["myelin_policy_ct"].Copy()
	ms.Pinning, ms.MaxEntries = ebpf.PinNone, policyCTBuckets(2048)+1
	to, err := ebpf.NewMap(ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { to.Close() })
	r, err := policyCTCarry(MapReplacement{Name: "myelin_policy_ct"}, dir+"/myelin_policy_ct", to, seed)
	if err != nil {
		t.Fatalf("carry: %v", err)
	}
	ct, err := mapPolicyCT(to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.close() })
	return r, ct
}

// A GC round on a table whose header does not say a round of this kind walked
// it less than policyCTClocksStale ago (programs before 2026-12-05 did not
// mark lookups for the GC; an agent down, an older one after a downgrade)
// restarts every entry's idle clock; a TCP entry a lookup found before gets the
// timeout of one that carried traffic, from that round on. An agent that
// restarts at once goes on with the clocks: a crash loop still deletes what a
// flood left.
func TestPrivilegedPolicyCTFirstRound(t *testing.T) {
	requirePrivileged(t)
	d := policyCTTableDatapath(t)
	ct := mappedPolicyCT(t, d)
	now := MonotonicNow()
	written := PolicyCTTimeoutTCP + time.Hour // ago: past any timeout
	last := PolicyCTTimeoutTCP + 2*time.Minute
	for _, c := range []struct {
		port uint16
		ref  uint32
	}{{5000, policyCTRefInUse}, {5001, 0}} {
		k := abKey(c.port, 9090)
		if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
			t.Fatal(err)
		}
		i, _, _, _ := ct.find(d.policyCTSeed, k)
		ct.slot(i).Born, ct.slot(i).Ref = policyCTUnits(now-written), c.ref
	}
	for _, r := range []struct {
		at   time.Duration
		want int
		why  string
	}{
		{0, 0, "first round: both written past their timeouts, kept"},
		{59 * time.Minute, 1, "59 min later: the one no lookup found is deleted"},
		{last, 1, "the timeout and 2 min later: the one in use is deleted"},
	} {
		if err := roundsRanUntil(d, now+r.at); err != nil {
			t.Fatal(err)
		}
		if n, err := d.GCPolicyCT(now + r.at); err != nil || n != r.want {
			t.Errorf("%s: removed %d (%v), want %d", r.why, n, err, r.want)
		}
	}
	if got, want := *ct.clocks(), policyCTUnits(now+last); got != want {
		t.Fatalf("header after a GC round: clocks word %d, want the round's time %d", got, want)
	}

	// The agent restarts: its GC's first round runs on the pinned maps.
	restarted, err := OpenPinned(d.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	k := abKey(5002, 9090)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	i, _, _, _ := ct.find(d.policyCTSeed, k)
	at := now + last
	ct.slot(i).Born = policyCTUnits(at - 2*time.Minute)
	if n, err := restarted.GCPolicyCT(at); err != nil || n != 1 {
		t.Errorf("restarted agent's first round: removed %d (%v), want the entry no lookup found for 2 min", n, err)
	}

	// No round of this kind walked the table for 10 min (the agent was down, or
	// an older one ran): the next round restarts the clocks, as what happened
	// meanwhile is not known; an entry written at the last round is kept.
	k = abKey(5003, 9090)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	i, _, _, _ = ct.find(d.policyCTSeed, k)
	ct.slot(i).Born = policyCTUnits(at)
	if n, err := restarted.GCPolicyCT(at + 10*time.Minute); err != nil || n != 0 {
		t.Errorf("a round 10 min after the last: removed %d (%v), want the clocks restarted, nothing removed", n, err)
	}
}

// An RST-ended TCP entry is deleted by the GC round that finds it still marked
// policyCTResetGrace or more after a round found it marked, and that finding is
// kept in the table (RESET of the slot's ref): agents restarting between the two
// rounds, even every second, go on to delete it. Before, the finding lived in the
// agent's memory, and an agent restarting faster than two rounds never deleted
// one. A mark gone by the next round (the receiver ignored the RST, the
// connection went on) keeps the entry and takes the note away.
func TestPrivilegedPolicyCTResetAcrossRestarts(t *testing.T) {
	requirePrivileged(t)
	d := policyCTTableDatapath(t)
	ct := mappedPolicyCT(t, d)
	ended, ignored := abKey(5010, 9090), abKey(5011, 9090)
	for _, k := range []myelinPolicyCtKey{ended, ignored} {
		if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi, Closing: policyCTReset}); err != nil {
			t.Fatal(err)
		}
	}
	noted := func(k myelinPolicyCtKey) (found, reset bool) {
		i, _, _, ok := ct.find(d.policyCTSeed, k)
		return ok, ok && ct.slot(i).Ref&policyCTRefReset != 0
	}
	now := MonotonicNow()
	round := func(dp *Datapath, at time.Duration, want int, why string) {
		t.Helper()
		if n, err := dp.GCPolicyCT(now + at); err != nil || n != want {
			t.Fatalf("%s: removed %d (%v), want %d", why, n, err, want)
		}
	}
	round(d, 0, 0, "the first round finds both marked")
	for _, k := range []myelinPolicyCtKey{ended, ignored} {
		if found, reset := noted(k); !found || !reset {
			t.Fatalf("after the first round: %v found %v, noted reset %v; want both", k, found, reset)
		}
	}
	// The connection of ignored goes on: its next segment takes the mark away.
	i, _, _, _ := ct.find(d.policyCTSeed, ignored)
	ct.slot(i).Entry.Closing = 0

	// The agent restarts every second; each restarted agent's first round comes
	// within the grace of the last one: nothing is deleted yet.
	for _, at := range []time.Duration{time.Second, 2 * time.Second} {
		restarted, err := OpenPinned(d.cfg.PinDir)
		if err != nil {
			t.Fatal(err)
		}
		round(restarted, at, 0, fmt.Sprintf("a restarted agent's round %v after the first", at))
		restarted.Close()
	}
	if found, reset := noted(ignored); !found || reset {
		t.Fatalf("unmarked entry after the restarted rounds: found %v, noted reset %v; want found, not noted", found, reset)
	}
	restarted, err := OpenPinned(d.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	round(restarted, 2*time.Second+policyCTResetGrace+2*time.Second, 1, "a restarted agent's round past the grace")
	if found, _ := noted(ended); found {
		t.Error("the entry still marked reset was not the one deleted")
	}
	if found, _ := noted(ignored); !found {
		t.Error("the entry whose mark went away was deleted")
	}

	// A round of an agent before RESET notes (a downgrade) kept the bit without
	// clearing it: the next round trusts no note, notes again, and the one after
	// deletes.
	ct.slot(i).Entry.Closing = policyCTReset
	at := 2*time.Second + policyCTResetGrace + 2*time.Second
	round(restarted, at+10*time.Second, 0, "marked again: the round notes it")
	*ct.clocks() = policyCTUnits(now + at + 20*time.Second) // the older agent's round
	round(restarted, at+30*time.Second, 0, "after an older agent's round: its notes are not trusted")
	round(restarted, at+40*time.Second, 1, "noted by this agent's last round: deleted")
}

// An entry left with its opener alone (after a purge, or an RST that ended its
// connection) keeps it for PolicyCTTimeoutOpenerOnly from the moment its ends
// went, however old the connection, so the packet that tracks it again
// meanwhile leaves the opener paying; packets the policy denies (lookups that
// mark the slot seen) and an RST mark don't keep it longer (it counts against
// nobody meanwhile: TestPolicyCTHeld). An RST-ended entry without an opener is
// emptied as before.
func TestPrivilegedPolicyCTOpenerOnly(t *testing.T) {
	requirePrivileged(t)
	d := policyCTTableDatapath(t)
	ct := mappedPolicyCT(t, d)
	now := MonotonicNow()
	put := func(k myelinPolicyCtKey, v myelinPolicyCtEntry) {
		t.Helper()
		if err := policyCTPut(d, k, v); err != nil {
			t.Fatal(err)
		}
		i, _, _, _ := ct.find(d.policyCTSeed, k)
		ct.slot(i).Born, ct.slot(i).Ref = policyCTUnits(now-2*time.Hour), policyCTRefRound // long-lived, in use
	}
	get := func(k myelinPolicyCtKey) (myelinPolicyCtEntry, bool) {
		_, v, _, ok := ct.find(d.policyCTSeed, k)
		return v, ok
	}
	round := func(at time.Duration, want int, why string) {
		t.Helper()
		if err := roundsRanUntil(d, now+at); err != nil {
			t.Fatal(err)
		}
		if n, err := d.GCPolicyCT(now + at); err != nil || n != want {
			t.Fatalf("%s: removed %d (%v), want %d", why, n, err, want)
		}
	}
	purged, reset, resetNoOpener := abKey(5020, 9090), abKey(5021, 9090), abKey(5022, 9090)
	// seen marks the slots as a denied packet's lookup would.
	seen := func() {
		for _, k := range []myelinPolicyCtKey{purged, reset} {
			if i, _, _, ok := ct.find(d.policyCTSeed, k); ok {
				ct.slot(i).Ref |= policyCTRefInUse | policyCTRefSeen
			}
		}
	}

	// A's connection into B, two hours old, marked by an RST the receiver
	// ignored; B's policy narrows.
	put(purged, myelinPolicyCtEntry{Ends: policyCTEndHi | policyCTOpenedLo, Closing: policyCTReset})
	if n, err := d.PurgePolicyCT(PolicyCTPurge{Endpoints: map[netip.Addr]bool{mustAddr(podBIP): true}}); err != nil || n != 1 {
		t.Fatalf("purge of B: changed %d (%v), want 1", n, err)
	}
	if v, ok := get(purged); !ok || v.Ends != policyCTOpenedLo {
		t.Fatalf("purged entry: %+v (found %v), want its opener alone", v, ok)
	}
	// Two connections an RST ended, one with an opener.
	put(reset, myelinPolicyCtEntry{Ends: policyCTEndHi | policyCTOpenedLo, Closing: policyCTReset})
	put(resetNoOpener, myelinPolicyCtEntry{Ends: policyCTEndHi, Closing: policyCTReset})
	round(0, 0, "the first round notes the RST marks")
	round(10*time.Second, 1, "10 s later: the RST-ended entries lose their ends (one emptied; the purged one, marked too, keeps its clock)")
	if v, ok := get(reset); !ok || v.Ends != policyCTOpenedLo || v.Closing != 0 {
		t.Errorf("RST-ended entry with an opener: %+v (found %v), want its opener alone, no close state", v, ok)
	}
	if _, ok := get(resetNoOpener); ok {
		t.Error("RST-ended entry without an opener: still there, want it emptied")
	}
	seen()
	round(40*time.Second, 0, "seen by denied packets, 40 s after the purge: both kept for the opener")
	seen()
	round(65*time.Second, 1, "65 s after the purge, seen again: the purged entry goes")
	if _, ok := get(purged); ok {
		t.Error("the purged entry was not the one deleted")
	}
	seen()
	round(75*time.Second, 1, "65 s after the RST's round, seen again: that entry goes too")
}
