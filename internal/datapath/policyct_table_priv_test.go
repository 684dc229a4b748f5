package datapath

import (
	"errors"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// bAllowsA8080 is pod B ingress-isolated, allowing pod A in on port 8080 only.
var bAllowsA8080 = policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
	entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}

// seedBAllowsA8080 seeds d with bAllowsA8080 (no tracked connections) and pods
// A and B.
func seedBAllowsA8080(t *testing.T, d *Datapath) {
	t.Helper()
	if err := errors.Join(seedPolicy(d, bAllowsA8080), seedEndpoints(d, seedAB)); err != nil {
		t.Fatal(err)
	}
}

// policyCTTableDatapath loads a datapath seeded by seedBAllowsA8080, with a
// table of 1,024 slots.
func policyCTTableDatapath(t *testing.T) *Datapath {
	t.Helper()
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTMax: 1024})
	seedBAllowsA8080(t, d)
	return d
}

// lruPolicyCTTypes are the key and value types of the connection table before
// 2026-12-05, an LRU hash of policy_ct_key to policy_ct_entry (this build's BTF
// of both).
func lruPolicyCTTypes(t *testing.T) (key, entry *btf.Struct) {
	t.Helper()
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(spec.Types.TypeByName("policy_ct_key", &key), spec.Types.TypeByName("policy_ct_entry", &entry)); err != nil {
		t.Fatal(err)
	}
	return key, entry
}

// toB runs an ACK (or with syn, a SYN) from A's port sport to B's port dport
// through myelin_to_pod and says whether it passed.
func toB(t *testing.T, d *Datapath, sport, dport uint16, syn bool) bool {
	t.Helper()
	p := ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, dport)
	if !syn {
		p = p.withTCPFlags(0x10)
	}
	ret, err := d.objs.MyelinToPod.Run(&ebpf.RunOptions{Data: p.build()})
	if err != nil {
		t.Fatal(err)
	}
	return ret == tcActOK
}

// abKey is the tracked key of A:sport ↔ B:dport (A's address is the lower).
func abKey(sport, dport uint16) myelinPolicyCtKey {
	return myelinPolicyCtKey{AddrLo: networkUint32(mustAddr(podA)), AddrHi: networkUint32(mustAddr(podBIP)),
		PortLo: htons(sport), PortHi: htons(dport), Proto: protoTCP}
}

// The agent and the programs hash a connection to the same bucket: a slot the
// agent places is what the programs find (B's end lets an ACK to a port its
// policy does not allow pass), and one the programs write is what the agent
// finds. A slot whose count is odd (a writer at it) is a miss, judged by the
// policy again; one left odd (its writer died) is emptied at the second GC round
// that finds it so, after which it is usable again.
func TestPrivilegedPolicyCTTableShared(t *testing.T) {
	requirePrivileged(t)
	d := policyCTTableDatapath(t)
	ct := mappedPolicyCT(t, d)
	if d.policyCTSeed == 0 || *ct.seed() != d.policyCTSeed {
		t.Fatalf("seed %#x, the table's header holds %#x: want the same, not 0", d.policyCTSeed, *ct.seed())
	}
	if toB(t, d, 5000, 9090, false) {
		t.Fatal("ACK to a port B does not allow, untracked: passed")
	}
	k := abKey(5000, 9090)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	if !toB(t, d, 5000, 9090, false) {
		t.Fatal("ACK of a connection the agent placed with B's end: denied, want tracked")
	}
	if !toB(t, d, 5001, 8080, true) {
		t.Fatal("allowed SYN: denied")
	}
	if v, ok := policyCTGet(d, abKey(5001, 8080)); !ok || v.Ends != policyCTEndHi|policyCTInHi {
		t.Fatalf("the programs' entry of the allowed SYN, as the agent finds it: %+v (found %v), want B's end, from its ingress check", v, ok)
	}

	i, _, seq, ok := ct.find(d.policyCTSeed, k)
	if !ok {
		t.Fatal("placed slot not found")
	}
	s := ct.slot(i)
	s.Seq = seq + 1 // a writer took it and died
	if toB(t, d, 5000, 9090, false) {
		t.Error("ACK whose slot is in a write: passed, want judged again (denied)")
	}
	for round, want := range []int{0, 1} {
		if n, err := d.GCPolicyCT(MonotonicNow()); err != nil || n != want {
			t.Fatalf("GC round %d with a slot left in a write: removed %d (%v), want %d", round, n, err, want)
		}
	}
	if s.Seq&1 != 0 || s.Key != (myelinPolicyCtKey{}) {
		t.Fatalf("slot left in a write after two GC rounds: count %d, key %+v; want even and empty", s.Seq, s.Key)
	}
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndHi}); err != nil {
		t.Fatal(err)
	}
	if !toB(t, d, 5000, 9090, false) {
		t.Error("ACK of a connection placed again in the freed slot: denied, want tracked")
	}
}

// A new connection whose three buckets are full takes the slot of the oldest
// connection of its own two that no lookup found since they last made room;
// when every one was found, the oldest, and the others lose their mark (a
// second chance, as an LRU gives). The connection pushed out has its next
// packet judged by the policy again; the others stay tracked, and its pair's
// bucket (other connections of A and B) is left as it was: it only gives room.
func TestPrivilegedPolicyCTFullBucket(t *testing.T) {
	requirePrivileged(t)
	const held = 2 * policyCTWays
	for _, c := range []struct {
		name       string
		ref        [held]uint32 // of the connections written 80, 70, ... 10 s ago
		evicted    int          // which of them the newcomer replaces
		openerOnly int          // which of them holds no end's bit (an opener alone), or -1
	}{
		{"none in use: the oldest", [held]uint32{}, 0, -1},
		{"the oldest in use: the oldest of the others", [held]uint32{1}, 1, -1},
		{"all in use: the oldest, the others' marks cleared", [held]uint32{1, 1, 1, 1, 1, 1, 1, 1}, 0, -1},
		{"all in use, the youngest an opener alone: it, not counted", [held]uint32{1, 1, 1, 1, 1, 1, 1, 1}, held - 1, held - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := policyCTTableDatapath(t)
			ct := mappedPolicyCT(t, d)
			sport := uint16(6000)
			for ; ; sport++ { // a newcomer with three distinct buckets
				if len(ct.slotsOf(d.policyCTSeed, abKey(sport, 8080))) == 3*policyCTWays {
					break
				}
			}
			newcomer := abKey(sport, 8080)
			pair, slots := ct.slotsOf(d.policyCTSeed, newcomer)[:policyCTWays], ct.slotsOf(d.policyCTSeed, newcomer)[policyCTWays:]
			now := policyCTUnits(MonotonicNow())
			// Other connections of A and B, the oldest of all, none in use,
			// filling the pair's bucket.
			for n, i := range pair {
				_, _, seq, _ := ct.read(i)
				if !ct.write(i, seq, func(s *myelinPolicyCtSlot) {
					s.Key, s.Entry = abKey(uint16(8000+n), 9090), myelinPolicyCtEntry{Ends: policyCTEndHi}
					s.Born = now - 100
				}) {
					t.Fatal("seed slot: written meanwhile")
				}
			}
			// Connections of A to B's port 9090 (which B's policy does not
			// allow: only their tracking lets them pass) filling both of the
			// newcomer's own buckets, each in its own first bucket.
			var sports []uint16
			for n, p := 0, uint16(7000); n < held; p++ {
				i := slots[n]
				if policyCTBucketsOf(d.policyCTSeed, ct.buckets, abKey(p, 9090))[1] != uint32(i/policyCTWays) {
					continue
				}
				_, _, seq, _ := ct.read(i)
				if !ct.write(i, seq, func(s *myelinPolicyCtSlot) {
					s.Key, s.Entry = abKey(p, 9090), myelinPolicyCtEntry{Ends: policyCTEndHi}
					if n == c.openerOnly {
						s.Entry.Ends = policyCTOpenedLo
					}
					s.Born, s.Ref = now-uint32(80-10*n), c.ref[n]
				}) {
					t.Fatal("seed slot: written meanwhile")
				}
				sports = append(sports, p)
				n++
			}
			if ev, err := d.PolicyCTEvictions(); err != nil || ev != (PolicyCTEvictions{}) {
				t.Fatalf("evictions before the newcomer = %+v, %v; want none", ev, err)
			}
			if !toB(t, d, sport, 8080, true) {
				t.Fatal("allowed SYN into two full buckets: denied")
			}
			if _, ok := policyCTGet(d, newcomer); !ok {
				t.Fatal("allowed SYN into two full buckets: not tracked")
			}
			allInUse := c.ref == [held]uint32{1, 1, 1, 1, 1, 1, 1, 1} && c.openerOnly < 0
			want := PolicyCTEvictions{Idle: 1}
			switch {
			case allInUse:
				want = PolicyCTEvictions{InUse: 1}
			case c.openerOnly >= 0:
				want = PolicyCTEvictions{}
			}
			if ev, err := d.PolicyCTEvictions(); err != nil || ev != want {
				t.Errorf("evictions after the newcomer = %+v, %v; want %+v", ev, err, want)
			}
			for n, i := range slots {
				want := c.ref[n]
				if allInUse {
					want = 0
				}
				if s := ct.slot(i); n != c.evicted && s.Ref != want {
					t.Errorf("connection written %d s ago: in-use mark %d after the newcomer, want %d", 80-10*n, s.Ref, want)
				}
			}
			for n, p := range sports {
				if tracked := toB(t, d, p, 9090, false); tracked != (n != c.evicted) {
					t.Errorf("connection written %d s ago after the newcomer: passes %v, want %v", 80-10*n, tracked, n != c.evicted)
				}
			}
			for n, i := range pair {
				if s := ct.slot(i); s.Key != abKey(uint16(8000+n), 9090) {
					t.Errorf("the pair's bucket, slot %d, after the newcomer: %+v, want A:%d's connection as it was", n, s.Key, 8000+n)
				}
			}
		})
	}
}

// A connection goes into its pair's bucket (one of A and B's addresses alone)
// while that has room, and into one of its own two when it is full, found
// either way. A table written before pair buckets (a connection in its own
// first bucket, the pair's empty) is found as it is. A SYN reusing the tuple
// of a connection left in its own bucket writes its fresh entry in the pair's
// bucket without reading on; lookups find the fresh one, and the next GC round
// empties the older one behind it.
func TestPrivilegedPolicyCTPairBucket(t *testing.T) {
	requirePrivileged(t)
	d := policyCTTableDatapath(t)
	ct := mappedPolicyCT(t, d)
	pairOf := func(k myelinPolicyCtKey) uint32 { return policyCTBucketsOf(d.policyCTSeed, ct.buckets, k)[0] }
	bucketOf := func(k myelinPolicyCtKey) (uint32, bool) {
		i, _, _, ok := ct.find(d.policyCTSeed, k)
		return uint32(i / policyCTWays), ok
	}
	// A's connections to B's port 8080 with three distinct buckets.
	var sports []uint16
	for p := uint16(6000); len(sports) < policyCTWays+1; p++ {
		if len(ct.slotsOf(d.policyCTSeed, abKey(p, 8080))) == 3*policyCTWays {
			sports = append(sports, p)
		}
	}
	for n, p := range sports {
		if !toB(t, d, p, 8080, true) {
			t.Fatalf("allowed SYN from A:%d: denied", p)
		}
		b, ok := bucketOf(abKey(p, 8080))
		if !ok {
			t.Fatalf("allowed SYN from A:%d: not tracked", p)
		}
		if inPair := b == pairOf(abKey(p, 8080)); inPair != (n < policyCTWays) {
			t.Errorf("connection %d of A and B: in the pair's bucket %v, want %v (it holds %d)", n+1, inPair, n < policyCTWays, policyCTWays)
		}
	}
	if ev, err := d.PolicyCTEvictions(); err != nil || ev != (PolicyCTEvictions{}) {
		t.Errorf("evictions = %+v, %v; want none", ev, err)
	}
	if _, err := clearPolicyCT(d); err != nil {
		t.Fatal(err)
	}

	// Before pair buckets: a connection to a port B's policy does not allow,
	// tracked in its own first bucket.
	old := abKey(sports[0], 9090)
	first := ct.slotsOf(d.policyCTSeed, old)[policyCTWays]
	_, _, seq, _ := ct.read(first)
	born := policyCTUnits(MonotonicNow())
	if !ct.write(first, seq, func(s *myelinPolicyCtSlot) {
		s.Key, s.Entry, s.Born = old, myelinPolicyCtEntry{Ends: policyCTEndHi}, born
	}) {
		t.Fatal("seed slot: written meanwhile")
	}
	if !toB(t, d, sports[0], 9090, false) {
		t.Error("ACK of a connection in its own first bucket, the pair's empty: denied, want tracked")
	}

	// A SYN from a pod of another node, which BPF delivers: its entry starts
	// afresh. The tuple's older connection left in its own first bucket (its
	// FINs never seen: a close state of B's FIN), the pair's bucket empty.
	fresh := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, PolicyCTMax: 1024})
	if err := seedPolicy(fresh, policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idRemote): {tcpPort(8080)}}}); err != nil {
		t.Fatal(err)
	}
	fct := mappedPolicyCT(t, fresh)
	var (
		uplink policyRow
		reused myelinPolicyCtKey
		v      myelinPolicyCtEntry
		slots  []int
	)
	for sport := uint16(7001); len(slots) != 3*policyCTWays; sport++ { // a tuple with three distinct buckets
		syn := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, sport).withDst(podBIP, 8080)
		uplink = policyRow{prog: fresh.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
			name: "SYN from a pod of another node", in: syn.build(), ctx: &skbCtx{IngressIfindex: 2},
			verdict: tcActRedirect, out: delivered(syn), reason: "FORWARDED"}}
		runPolicyRows(t, fresh, []policyRow{uplink})
		reused, v, _ = policyCTOnly(t, fresh, podBIP)
		if n, err := clearPolicyCT(fresh); err != nil || n != 1 {
			t.Fatalf("clear: %d, %v", n, err)
		}
		slots = fct.slotsOf(fresh.policyCTSeed, reused)
	}
	first = slots[policyCTWays]
	_, _, seq, _ = fct.read(first)
	if !fct.write(first, seq, func(s *myelinPolicyCtSlot) {
		s.Key, s.Entry, s.Born = reused, v, born
		s.Entry.Closing = uint32(myelinPolicyCtClosingPOLICY_CT_FIN_HI)
	}) {
		t.Fatal("seed slot: written meanwhile")
	}
	uplink.name = "the SYN again, its tuple's older connection in its own first bucket"
	runPolicyRows(t, fresh, []policyRow{uplink})
	inPair := func() bool {
		i, v, _, ok := fct.find(fresh.policyCTSeed, reused)
		return ok && i/policyCTWays == slots[0]/policyCTWays && v.Closing == 0
	}
	if !inPair() {
		t.Fatal("the reused tuple's entry as lookups find it: not the SYN's fresh one (no close state) in the pair's bucket")
	}
	if k, _, _, _ := fct.read(first); k != reused {
		t.Fatalf("the older entry behind the fresh one before a GC round: %+v, want it still there (the SYN read no further)", k)
	}
	if n, err := fresh.GCPolicyCT(MonotonicNow()); err != nil || n != 1 {
		t.Errorf("GC round: removed %d (%v), want 1 (the older entry behind the fresh one)", n, err)
	}
	if k, _, _, _ := fct.read(first); k != (myelinPolicyCtKey{}) {
		t.Errorf("the older entry behind the fresh one after a GC round: %+v, want empty", k)
	}
	if !inPair() {
		t.Error("the reused tuple's fresh entry after a GC round: not found in the pair's bucket")
	}
	if n, err := d.GCPolicyCT(MonotonicNow()); err != nil || n != 0 {
		t.Errorf("GC round of the table written before pair buckets: removed %d (%v), want 0 (it shadows nothing)", n, err)
	}
	if !toB(t, d, sports[0], 9090, false) {
		t.Error("ACK of a connection in its own first bucket after a GC round: denied, want tracked")
	}
}

// Connections of one pair written at the same moment on two CPUs (a pool a
// client opens at once) aim at the same first empty slot of their pair's
// bucket: the writer that loses it takes the next empty one, so no allowed
// SYN goes untracked while the table has room.
func TestPrivilegedPolicyCTPairRace(t *testing.T) {
	requirePrivileged(t)
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a race of two busy-spinning goroutines needs two CPUs (GOMAXPROCS)")
	}
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, PolicyCTMax: 1024})
	if err := errors.Join(seedPolicy(d, policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idRemote): {tcpPort(8080)}}}), seedEndpoints(d, seedAB)); err != nil {
		t.Fatal(err)
	}
	synFrom := func(sport uint16) func() error {
		in := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, sport).withDst(podBIP, 8080).build()
		return func() error {
			_, err := d.objs.MyelinFromNetdev.Run(runOptions(in, &skbCtx{IngressIfindex: 2}))
			return err
		}
	}
	const rounds = 2000
	lost := 0
	for r := range rounds {
		if _, err := clearPolicyCT(d); err != nil {
			t.Fatal(err)
		}
		other := synFrom(7000)
		if err := race(r, func() {
			if err := other(); err != nil {
				t.Error(err)
			}
		}, synFrom(7001)); err != nil {
			t.Fatal(err)
		}
		if n := len(policyCTEntries(d)); n != 2 {
			lost += 2 - n
		}
	}
	if lost != 0 {
		t.Errorf("%d of %d allowed SYNs written at the same moment as another of their pair: not tracked", lost, 2*rounds)
	}
}

// Of two copies of a connection the one lookups find is kept: a GC round
// empties the copy behind it, in the pair's bucket too (two checks wrote it at
// once), and a replacement of the table carries the front one alone, which
// stays in front of nothing.
func TestPrivilegedPolicyCTShadowedCopies(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	d := loadPolicyCTMax(t, dir, 1024)
	ct := mappedPolicyCT(t, d)
	born := policyCTUnits(MonotonicNow())
	put := func(i int, k myelinPolicyCtKey, closing uint32) {
		t.Helper()
		_, _, seq, _ := ct.read(i)
		if !ct.write(i, seq, func(s *myelinPolicyCtSlot) {
			s.Key, s.Entry, s.Born = k, myelinPolicyCtEntry{Ends: policyCTEndHi, Closing: closing}, born
		}) {
			t.Fatal("seed slot: written meanwhile")
		}
	}
	const front, behind = 0, uint32(myelinPolicyCtClosingPOLICY_CT_FIN_HI)
	twice := abKey(5000, 9090) // both copies in its pair's bucket
	pair := ct.slotsOf(d.policyCTSeed, twice)[:policyCTWays]
	put(pair[1], twice, front)
	put(pair[3], twice, behind)
	spread := abKey(5001, 9090) // in its pair's bucket and in its own first one
	for p := uint16(5002); len(ct.slotsOf(d.policyCTSeed, spread)) < 2*policyCTWays; p++ {
		spread = abKey(p, 9090)
	}
	slots := ct.slotsOf(d.policyCTSeed, spread)
	put(slots[0], spread, front)
	put(slots[policyCTWays], spread, behind)

	r, carried := carryPolicyCT(t, dir, 0x5eed5eed5eed)
	if r.Carried != 2 {
		t.Fatalf("carry = %+v; want 2 connections carried, one copy of each", r)
	}
	carried.each(func(_ int, k myelinPolicyCtKey, v myelinPolicyCtEntry, _ uint32) {
		if v.Closing != front {
			t.Errorf("carried copy of %+v: close state %#x, want the front copy's (%#x)", k, v.Closing, front)
		}
	})

	if n, err := d.GCPolicyCT(MonotonicNow()); err != nil || n != 2 {
		t.Errorf("GC round: removed %d (%v), want 2 (the copies behind)", n, err)
	}
	for _, c := range []struct {
		name          string
		k             myelinPolicyCtKey
		kept, emptied int
	}{{"two copies in the pair's bucket", twice, pair[1], pair[3]}, {"copies in the pair's and its own bucket", spread, slots[0], slots[policyCTWays]}} {
		if k, v, _, _ := ct.read(c.kept); k != c.k || v.Closing != front {
			t.Errorf("%s, after a GC round: the front slot holds %+v %+v, want the front copy", c.name, k, v)
		}
		if k, _, _, _ := ct.read(c.emptied); k != (myelinPolicyCtKey{}) {
			t.Errorf("%s, after a GC round: the copy behind is still there (%+v)", c.name, k)
		}
	}
}
