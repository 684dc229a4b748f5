package datapath

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
)

// Forgetting one end of a tracked connection drops that end's bit and keeps
// the entry's opener; an entry with neither, or with an end whose pod is gone,
// is emptied. It never brings back a bit the datapath has cleared since the
// agent read the slot: a write with the count
// the agent read is refused once a program wrote the slot (a SYN of the low
// end restarting the entry with only its own bit), and the pass then judges
// what the slot holds now. Without such a race, only the named end's bit goes;
// an entry gone stays gone.
func TestPrivilegedPolicyCTPurgeNoStaleBit(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	lo, hi := mustAddr("10.1.0.10"), mustAddr("10.1.0.20")
	k := myelinPolicyCtKey{AddrLo: addrU32(lo.As4()), AddrHi: addrU32(hi.As4()), PortLo: 6001, PortHi: 8080, Proto: protoTCP}
	purgeLo := PolicyCTPurge{Endpoints: map[netip.Addr]bool{lo: true}}
	purgeGone := PolicyCTPurge{Peers: map[netip.Addr]bool{lo: true}, Gone: map[netip.Addr]bool{lo: true}}
	both := policyCTEndLo | policyCTEndHi
	for _, c := range []struct {
		name        string
		now         uint32 // 0: no entry
		want        uint32 // 0: no entry
		wantChanged bool
		purge       PolicyCTPurge
	}{
		{"both ends noted, low end purged: the high end's bit stays", both, policyCTEndHi, true, purgeLo},
		{"only the low end: the entry goes", policyCTEndLo, 0, true, purgeLo},
		{"only the low end, which opened it: its opener stays (it goes on paying)", policyCTEndLo | policyCTOpenedLo, policyCTOpenedLo, true, purgeLo},
		{"only the low end, the high one opened it: its opener stays", policyCTEndLo | policyCTOpenedHi, policyCTOpenedHi, true, purgeLo},
		{"both ends, the low one opened it: the high end's bit and the opener stay", both | policyCTOpenedLo, policyCTEndHi | policyCTOpenedLo, true, purgeLo},
		{"only the high end: it stays", policyCTEndHi, policyCTEndHi, false, purgeLo},
		{"gone: stays gone", 0, 0, false, purgeLo},
		// The low end's pod was deleted: its /32 left the ipcache. Nobody sends on
		// its connections any more: their entries go, opener and all.
		{"pod gone, it opened it: the entry goes", policyCTEndLo | policyCTOpenedLo, 0, true, purgeGone},
		{"pod gone, only its opener left: the entry goes", policyCTOpenedLo, 0, true, purgeGone},
		{"pod gone, the other end opened it: the entry goes", both | policyCTOpenedHi, 0, true, purgeGone},
	} {
		t.Run(c.name, func(t *testing.T) {
			policyCTDelete(d, k)
			if c.now != 0 {
				if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: c.now}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := d.PurgePolicyCT(c.purge)
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) != c.wantChanged || n > 1 {
				t.Errorf("changed %d entries, want changed %v", n, c.wantChanged)
			}
			v, ok := policyCTGet(d, k)
			switch {
			case c.want == 0 && ok:
				t.Errorf("entry has ends %#x, want no entry", v.Ends)
			case c.want != 0 && (!ok || v.Ends != c.want):
				t.Errorf("entry ends %#x (tracked %v), want %#x", v.Ends, ok, c.want)
			}
		})
	}
	// The race: the agent read both bits, then a SYN of the low end restarted
	// the entry with only its bit. The agent's write with the old count is
	// refused; the pass reads the slot again and drops the low bit: no entry,
	// not the high end's old bit.
	policyCTDelete(d, k)
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: both}); err != nil {
		t.Fatal(err)
	}
	ct := mappedPolicyCT(t, d)
	i, _, listed, ok := ct.find(d.policyCTSeed, k)
	if !ok {
		t.Fatal("entry just written not found")
	}
	if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndLo}); err != nil {
		t.Fatal(err)
	}
	if ct.write(i, listed, func(s *myelinPolicyCtSlot) { s.Entry.Ends = policyCTEndHi }) {
		t.Fatal("a write with the count read before the SYN's write was taken")
	}
	if n, err := d.PurgePolicyCT(purgeLo); err != nil || n != 1 {
		t.Fatalf("PurgePolicyCT = %d, %v; want 1 entry changed", n, err)
	}
	if v, ok := policyCTGet(d, k); ok {
		t.Errorf("after the restarted entry's purge: ends %#x, want no entry", v.Ends)
	}
}

// A connection that keeps one end after a purge keeps the rest of its entry:
// a UDP connection its last seen, which GCPolicyCT reads (a last seen of 0
// would never be collected); a TCP connection its close state.
func TestPrivilegedPolicyCTPurgeKeepsLastSeen(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	lo, hi := mustAddr("10.1.0.10"), mustAddr("10.1.0.20")
	purgeLo := PolicyCTPurge{Endpoints: map[netip.Addr]bool{lo: true}}
	const seen = 12345
	for _, proto := range []uint8{protoUDP, protoTCP} {
		k := myelinPolicyCtKey{AddrLo: addrU32(lo.As4()), AddrHi: addrU32(hi.As4()), PortLo: 5353, PortHi: 53, Proto: proto}
		in := myelinPolicyCtEntry{Ends: policyCTEndLo | policyCTEndHi, Closing: 1, FinLo: seen}
		if err := policyCTPut(d, k, in); err != nil {
			t.Fatal(err)
		}
		if _, err := d.PurgePolicyCT(purgeLo); err != nil {
			t.Fatal(err)
		}
		want := in
		want.Ends = policyCTEndHi
		if v, ok := policyCTGet(d, k); !ok || v != want {
			t.Errorf("proto %d after the low end's purge: entry %+v (tracked %v), want %+v", proto, v, ok, want)
		}
	}
}

// A check that adds its end's bit writes the ends it read plus that bit,
// under the slot's count: a purge that took another end's bit between the
// check's lookup and its write must not get that bit back (that end's packets
// would pass unjudged). policy_ct_put refuses a write when the entry's ends changed since
// the caller's copy, or the entry went; the next packet is judged again. A race
// of many rounds: B's segment (its egress check adds B's bit to an entry of A's)
// against a purge of A's end landing at a random moment; A's bit never returns.
func TestPrivilegedBPFPolicyCTPurgeRace(t *testing.T) {
	requirePrivileged(t)
	d, k, run := addEndRace(t)
	ct := mappedPolicyCT(t, d)
	purgeA := PolicyCTPurge{Endpoints: map[netip.Addr]bool{mustAddr(podA): true}}
	// A's entry alone goes with the purge (B's write finds no entry); one A
	// opened keeps its opener (B's write finds other ends than it read).
	for _, seed := range []uint32{policyCTEndLo, policyCTEndLo | policyCTOpenedLo} {
		rounds, restored, refused := 10000, 0, 0
		for r := range rounds {
			if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: seed}); err != nil {
				t.Fatal(err)
			}
			i, _, _, _ := ct.find(d.policyCTSeed, k)
			err := race(r, func() {
				for {
					if changed, ok := purgePolicyCTSlot(ct, i, purgeA, policyCTUnits(MonotonicNow())); changed || !ok {
						return
					}
					if _, v, _, busy := ct.read(i); !busy && v.Ends&policyCTEndLo == 0 {
						return
					}
				}
			}, run)
			if err != nil {
				t.Fatal(err)
			}
			v, ok := policyCTGet(d, k)
			if ok && v.Ends&policyCTEndLo != 0 {
				restored++
			}
			if !ok || v.Ends&policyCTEndHi == 0 {
				refused++ // B's write refused (the purge came between its lookup and its write) or given up (the purge was at the slot)
			}
		}
		if restored > 0 {
			t.Errorf("A's entry %#x: %d of %d rounds: A's end bit back after its purge", seed, restored, rounds)
		}
		t.Logf("A's entry %#x: %d of %d rounds without B's bit after the round (B's write refused or given up)", seed, refused, rounds)
	}
}

// The close state is written in place (policy_ct_close: an atomic OR from the
// CPU that carries the close segment), not whole under the slot's count. A
// check that adds its end's bit to a copy must not write the copy's close
// state back over a FIN noted since its lookup: the entry would never see its
// close through and would hold its payer's budget until the idle timeout. A
// race of many rounds: B's segment adding B's bit against A's FIN noted in
// place at a moving moment; the FIN is never lost, whether B's bit went in or
// not.
func TestPrivilegedBPFPolicyCTCloseRace(t *testing.T) {
	requirePrivileged(t)
	rounds, undone, both := addEndRounds(t, func(s *myelinPolicyCtSlot, _ uint32) func() {
		return func() { atomic.OrUint32(&s.Entry.Closing, policyCTFinLo) }
	}, func(v myelinPolicyCtEntry) bool { return v.Closing&policyCTFinLo == 0 })
	if undone > 0 {
		t.Errorf("%d of %d rounds: A's FIN noted in place was undone by B's write of its copy", undone, rounds)
	}
	t.Logf("%d of %d rounds with B's bit and A's FIN both in the entry", both, rounds)
}

// A lookup that meets a writer at the slot misses, and the check that then
// allows the packet writes an entry of its own: only if there is still none
// (POLICY_CT_PUT_NEW). Written whole over what the other writer left, it would
// take away that entry's other end, opener and close state. A race of many
// rounds: A's entry held by a writer (the count odd) that notes A's FIN and
// lets go at a moving moment, against B's segment; A's end, opener and FIN are
// never lost.
func TestPrivilegedBPFPolicyCTMissRace(t *testing.T) {
	requirePrivileged(t)
	rounds, lost, both := addEndRounds(t, func(s *myelinPolicyCtSlot, seq uint32) func() {
		if !atomic.CompareAndSwapUint32(&s.Seq, seq, seq+1) {
			t.Fatal("the slot's count moved")
		}
		return func() {
			s.Entry.Closing |= policyCTFinLo
			atomic.AddUint32(&s.Seq, 1)
		}
	}, func(v myelinPolicyCtEntry) bool {
		return v.Ends&addEndA != addEndA || v.Closing&policyCTFinLo == 0
	})
	if lost > 0 {
		t.Errorf("%d of %d rounds: B's write over the entry another writer left took away A's end, opener or FIN", lost, rounds)
	}
	t.Logf("%d of %d rounds with B's bit added to A's entry; the others gave B's write up", both, rounds)
}

// addEndA is the entry of A's that addEndRounds' rounds start from: A's end, A the opener.
const addEndA = policyCTEndLo | policyCTOpenedLo

// addEndRounds races B's segment adding B's bit (addEndRace) against another
// writer 10,000 times: each round puts A's entry afresh, arm gets its slot and
// count and returns the other writer's act, and lost judges the entry after the
// round. It counts the rounds lost says lost what A held, and the others with
// B's bit, which must be some: B's write is made.
func addEndRounds(t *testing.T, arm func(s *myelinPolicyCtSlot, seq uint32) func(),
	lost func(v myelinPolicyCtEntry) bool) (rounds, lostN, added int) {
	t.Helper()
	d, k, run := addEndRace(t)
	ct := mappedPolicyCT(t, d)
	rounds = 10000
	for r := range rounds {
		if err := policyCTPut(d, k, myelinPolicyCtEntry{Ends: addEndA}); err != nil {
			t.Fatal(err)
		}
		i, _, seq, _ := ct.find(d.policyCTSeed, k)
		if err := race(r, arm(ct.slot(i), seq), run); err != nil {
			t.Fatal(err)
		}
		v, ok := policyCTGet(d, k)
		switch {
		case !ok:
			t.Fatalf("round %d: the entry is gone", r)
		case lost(v):
			lostN++
		case v.Ends&policyCTEndHi != 0:
			added++
		}
	}
	if added == 0 {
		t.Errorf("no round of %d has B's bit: B's write was never made", rounds)
	}
	return rounds, lostN, added
}

// policyCTFinLo is the close state's bit for the lo end's FIN (enum policy_ct_closing).
const policyCTFinLo = uint32(myelinPolicyCtClosingPOLICY_CT_FIN_LO)

// addEndRace loads a datapath where pod B's segment to A (run) adds B's end to
// a tracked entry k of A's (legacy host routing: B's egress check, B isolated
// for ingress from A on port 8080).
func addEndRace(t *testing.T) (d *Datapath, k myelinPolicyCtKey, run func() error) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a race of two busy-spinning goroutines needs two CPUs (GOMAXPROCS)")
	}
	d = loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTMax: 1024})
	st := policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	if err := seedPolicy(d, st); err != nil {
		t.Fatal(err)
	}
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	_, push := abSegments(3003)
	in, ctxB := push.build(), &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	return d, abKey(3003, 8080), func() error {
		_, err := d.objs.MyelinFromPod.Run(runOptions(in, ctxB))
		return err
	}
}

// race runs act on another goroutine at a moment that moves with round r
// while run runs on this one. Both goroutines busy-spin (no wake-up latency
// between them), so act lands within the ~100 ns between a program's lookup
// and its write in some of the rounds; on one CPU they would take turns by
// preemption (~10 ms a round), so addEndRace's tests need two.
func race(r int, act func(), run func() error) error {
	var armed, fire atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		armed.Store(true)
		for !fire.Load() {
		}
		var spun atomic.Uint32
		for spun.Add(1) < uint32(r%101*5) {
		}
		act()
	}()
	for !armed.Load() {
	}
	fire.Store(true)
	err := run()
	<-done
	return err
}

// A purge judges again the ends it names for their pod's policy when the
// agent gives it Allowed, in the direction the end's check accepted the
// connection: an end whose bit came from its own egress check (OUT) stays if
// the end may open it, any other if its peer may open it to the end. B (isolated both ways, admitting A on TCP 8080) keeps its end of
// A's connection when a change of B's policy still admits A, so B's push to A
// passes before any segment of A's (a watch, a server stream); a change that
// no longer admits A, or a purge without Allowed, forgets B's end and B's push
// is denied until A's next segment tracks it again. A (egress-isolated,
// allowed to ask a pod of another node on UDP 53) keeps its end of its query,
// whose bit its egress check set, so the answer passes. An end is judged only
// in its own direction: B's datagram into A, admitted under the old policy, is
// denied once A no longer admits B, although A may send to B; A's datagrams to
// the remote pod, once A's egress no longer allows them, are denied although
// A's ingress is open (the remote pod could open the same tuple to A).
func TestPrivilegedBPFPolicyPurgeKeepsAllowed(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	a, b, remote := mustAddr(podA), mustAddr(podBIP), mustAddr(remoteIP)
	syn := ipv4(protoTCP, podA, podBIP).withSrc(podA, 4001).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	seg, push := abSegments(4001)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}

	var asked []PolicyCTEnd
	judge := func(allow func(PolicyCTEnd) bool) func(PolicyCTEnd) bool {
		return func(e PolicyCTEnd) bool { asked = append(asked, e); return allow(e) }
	}
	yes, no := judge(func(PolicyCTEnd) bool { return true }), judge(func(PolicyCTEnd) bool { return false })
	onlyOut := judge(func(e PolicyCTEnd) bool { return e.Egress })
	onlyIn := judge(func(e PolicyCTEnd) bool { return !e.Egress })
	purge := func(ep netip.Addr, allowed func(PolicyCTEnd) bool, want ...PolicyCTEnd) func(*Datapath) error {
		return func(d *Datapath) error {
			asked = nil
			if _, err := d.PurgePolicyCT(PolicyCTPurge{Endpoints: map[netip.Addr]bool{ep: true}, Allowed: allowed}); err != nil {
				return err
			}
			if !slices.Equal(asked, want) {
				return fmt.Errorf("the purge asked about %+v, want %+v", asked, want)
			}
			return nil
		}
	}
	bIn := PolicyCTEnd{Local: b, Peer: a, LocalPort: 8080, PeerPort: 4001, Proto: protoTCP}
	first := verdictStep("A's SYN enters B (allowed: tracked)", toPod, "to-pod", syn, nil, true)
	first.seed = isolatedB(tcpPort(8080))
	runPolicySteps(t, d, []policyStep{
		first,
		after(verdictStep("B's push leaves B (tracked)", fromPod, "from-pod", push, ctxB, true),
			trackedEnds(policyCTEndHi|policyCTInHi, "after A's SYN (B's end from its ingress check)")),
		after(verdictStep("B's policy changed, still admitting A: B's end kept, its push passes", fromPod, "from-pod", push, ctxB, true),
			purge(b, yes, bIn), trackedEnds(policyCTEndHi|policyCTInHi, "after a purge that kept B's end")),
		after(verdictStep("B's policy changed, no longer admitting A: B's end forgotten, its push is denied", fromPod, "from-pod", push, ctxB, false),
			purge(b, no, bIn)),
		verdictStep("A's next segment is judged and tracked again", toPod, "to-pod", seg, nil, true),
		after(verdictStep("then B's push passes", fromPod, "from-pod", push, ctxB, true),
			trackedEnds(policyCTEndHi|policyCTInHi, "after A's segment tracked it again (B's end from its ingress check)")),
		after(verdictStep("a purge without Allowed forgets B's end: B's push is denied", fromPod, "from-pod", push, ctxB, false),
			purge(b, nil)),
	})

	query := ipv4(protoUDP, podA, remoteIP).withSrc(podA, 5001).withDst(remoteIP, 53)
	answer := ipv4(protoUDP, remoteIP, podA).withSrc(remoteIP, 53).withDst(podA, 5001)
	aOut := PolicyCTEnd{Local: a, Peer: remote, LocalPort: 5001, PeerPort: 53, Proto: protoUDP, Egress: true}
	asks := verdictStep("A's query leaves A (allowed: tracked)", fromPod, "from-pod", query, ctxPodA, true)
	asks.seed = &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idRemote): {{Proto: protoUDP, Lo: 53, Hi: 53}}}}
	runPolicySteps(t, d, []policyStep{
		asks,
		after(verdictStep("A's policy changed, still allowing A's query: the answer passes", toPod, "to-pod", answer, nil, true),
			trackedEnds(policyCTEndLo|policyCTOpenedLo|policyCTOutLo, "after A's query (A's end from its egress check)"),
			purge(a, onlyOut, aOut)),
		after(verdictStep("no longer allowed: the answer is denied", toPod, "to-pod", answer, nil, false),
			purge(a, no, aOut)),
	})

	egressOnly := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idRemote): {{Proto: protoUDP, Lo: 53, Hi: 53}}}}
	asks = verdictStep("A (egress-isolated only) asks the remote pod (allowed: tracked)", fromPod, "from-pod", query, ctxPodA, true)
	asks.seed = egressOnly
	runPolicySteps(t, d, []policyStep{
		asks,
		after(verdictStep("A's egress no longer allows it, its ingress is open: A's next query is denied", fromPod, "from-pod", query, ctxPodA, false),
			func(d *Datapath) error { return seedPolicyKeepingCT(d, policyState{flags: egressOnly.flags}) },
			purge(a, onlyIn, aOut)),
	})

	fromB := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 6000).withDst(podA, 5000)
	admitsB := verdictStep("B's datagram enters A (admitted: tracked)", toPod, "to-pod", fromB, nil, true)
	admitsB.seed = &policyState{flags: map[string]PolicyFlags{podA: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podA, idB): {{Proto: protoUDP, Lo: 5000, Hi: 5000}}}}
	tightened := func(d *Datapath) error {
		return seedPolicyKeepingCT(d, policyState{flags: map[string]PolicyFlags{podA: PolicyIngress}})
	}
	runPolicySteps(t, d, []policyStep{
		admitsB,
		after(verdictStep("A no longer admits B, A's egress is open: A's end (from its ingress) is forgotten, B is denied", toPod, "to-pod", fromB, nil, false),
			trackedEnds(policyCTEndLo|policyCTInLo, "after B's datagram (A's end from its ingress check)"), tightened,
			purge(a, onlyOut, PolicyCTEnd{Local: a, Peer: b, LocalPort: 5000, PeerPort: 6000, Proto: protoUDP})),
	})
}
