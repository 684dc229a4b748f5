package datapath

import (
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// PolicyCTTimeoutOther is how long NetworkPolicy keeps tracking a connection of a
// protocol without a close to follow (UDP, SCTP, ICMP) after its last packet:
// GCPolicyCT then deletes its myelin_policy_ct entry, and its next packet is judged
// by the policy again (and tracked again if allowed), as after an eviction. TCP
// connections give their entries back when both FINs are acknowledged.
const PolicyCTTimeoutOther = 60 * time.Second

// PolicyCTTimeoutTCP is how long NetworkPolicy keeps tracking a TCP connection
// that carried traffic after its entry was written (a lookup found it) but
// passed no tracked packet since: longer than Linux's default keepalive time
// (net.ipv4.tcp_keepalive_time, 2 h) with a margin for its first probe, so an
// idle connection with keepalive on keeps its entry; shorter than the Service
// conntrack's established timeout (6 h), as silent connections hold their
// payer's policy-ct-pod-max. PolicyCTTimeoutTCPUnseen is for a TCP entry no lookup found after
// its write: a handshake never completed (a client gone, a SYN flood), a stray
// segment. GCPolicyCT then deletes the entry; a connection that does send again
// is judged by the policy again, as after an eviction. Without them, an entry
// whose FINs never came stayed for good and counted against its pod's
// policy-ct-pod-max: enough of them (a peer the pod allows can send them) and
// every new connection of the pod was dropped.
const (
	PolicyCTTimeoutTCP       = 2*time.Hour + 15*time.Minute
	PolicyCTTimeoutTCPUnseen = 60 * time.Second
)

// PolicyCTTimeoutOpenerOnly is how long an entry that no end's bit is left in
// keeps its opener (who pays for it: policyCTHeld) after the purge or the RST
// that took the ends away (PurgePolicyCT; GCPolicyCT). It allows nothing; a
// packet the policy allows meanwhile tracks the connection again with the same
// opener (a server's push on a client's connection does not make the server
// pay), and packets the policy denies don't keep it.
const PolicyCTTimeoutOpenerOnly = 60 * time.Second

// policyCTOpenerOnly says whether entry v holds its opener and no end's bit.
func policyCTOpenerOnly(v myelinPolicyCtEntry) bool {
	return v.Ends&policyCTEnds == 0 && v.Ends&policyCTOpened != 0
}

// policyCTOpenerOnlyIdle says whether entry v, with born as its slot holds it,
// is an opener-only entry older than PolicyCTTimeoutOpenerOnly at now
// (policyCTUnits). born is when the ends went (or the carry's time), and the
// GC does not move it on for such an entry: a lookup by a denied packet marks
// the slot seen.
func policyCTOpenerOnlyIdle(v myelinPolicyCtEntry, born, now uint32) bool {
	return policyCTOpenerOnly(v) && policyCTSince(born, now) > PolicyCTTimeoutOpenerOnly
}

// The bits of a slot's ref (enum policy_ct_ref).
const (
	policyCTRefInUse = uint32(myelinPolicyCtRefPOLICY_CT_REF_IN_USE)
	policyCTRefSeen  = uint32(myelinPolicyCtRefPOLICY_CT_REF_SEEN)
	policyCTRefRound = uint32(myelinPolicyCtRefPOLICY_CT_REF_ROUND)
	policyCTRefReset = uint32(myelinPolicyCtRefPOLICY_CT_REF_RESET)
)

// policyCTTimeShift is the datapath's unit of a non-TCP entry's last seen
// (POLICY_CT_TIME_SHIFT, lib/policy_ct_table.h): 2^30 ns of CLOCK_MONOTONIC_COARSE.
const policyCTTimeShift = 30

// policyCTUnits is now, a time on the MonotonicNow clock, in the datapath's unit
// of last seen. The datapath reads CLOCK_MONOTONIC_COARSE, which trails
// CLOCK_MONOTONIC by at most a tick.
func policyCTUnits(now time.Duration) uint32 {
	return uint32(uint64(now) >> policyCTTimeShift)
}

// policyCTSince is how long before now (both policyCTUnits) then lies; 0 for a
// then at or ahead of now (the datapath's coarse clock against the GC's).
func policyCTSince(then, now uint32) time.Duration {
	if int32(now-then) <= 0 {
		return 0
	}
	return time.Duration(uint64(now-then) << policyCTTimeShift)
}

// policyCTReset is the close state an RST leaves on a TCP entry.
const policyCTReset = uint32(myelinPolicyCtClosingPOLICY_CT_RESET)

// policyCTIdle says whether entry v of key k is to be deleted at now
// (policyCTUnits): a non-TCP connection last seen more than PolicyCTTimeoutOther
// ago, or whose last seen is more than policyCTAheadMax ahead of now. The
// datapath's clock trails the GC's by a tick at most, so such a time is none it
// wrote: a TCP close state's FIN number, written in place through a slot that
// was emptied and reused meanwhile (lib/policy_ct.h, policy_ct_close), which a
// peer chooses and which would otherwise keep the entry for good.
func policyCTIdle(k myelinPolicyCtKey, v myelinPolicyCtEntry, now uint32) bool {
	if k.Proto == unix.IPPROTO_TCP {
		return false
	}
	if ahead := int32(v.FinLo - now); ahead >= 0 {
		return ahead > policyCTAheadMax
	}
	return time.Duration(uint64(now-v.FinLo)<<policyCTTimeShift) > PolicyCTTimeoutOther
}

// policyCTAheadMax is how far, in policyCTUnits, an entry's last seen may lie
// ahead of the GC's now: the datapath's coarse clock trails it, never leads.
const policyCTAheadMax = 2

// policyCTIdleTCP says whether TCP entry k, with ref and born as its slot holds
// them, is to be deleted at now (policyCTUnits): idle since born (its write, or
// the last GC round that found it seen) past PolicyCTTimeoutTCP when it carried
// traffic after its write, else past PolicyCTTimeoutTCPUnseen. A born ahead of
// now (the datapath's coarse clock against the GC's) is not idle.
func policyCTIdleTCP(k myelinPolicyCtKey, ref, born, now uint32) bool {
	if k.Proto != unix.IPPROTO_TCP {
		return false
	}
	timeout := PolicyCTTimeoutTCPUnseen
	if ref&(policyCTRefInUse|policyCTRefRound) != 0 {
		timeout = PolicyCTTimeoutTCP
	}
	return policyCTSince(born, now) > timeout
}

// policyCTClocksFresh says whether a GC round at now (policyCTUnits) may go on
// with the slots' idle clocks as they are: the table's header says a GC round
// that keeps them (this kind: noteRound) walked it last less than
// policyCTClocksStale ago (or up to policyCTAheadMax ahead: another agent's round
// that read its clock later and stored first). Otherwise the round restarts
// every clock: a table no such round walked (programs before 2026-12-05 marked
// no lookups for the GC, and born was the write's time for good), one an older
// agent (after a downgrade) or no agent looked after for a while: whatever
// happened meanwhile is not known. Kept in the pinned table, not the agent: an
// agent that restarts, even in a loop, goes on with the clocks, so what a flood
// left is deleted on time.
func policyCTClocksFresh(last, now uint32) bool {
	if last == 0 {
		return false
	}
	if ahead := last - now; ahead <= policyCTAheadMax {
		return true
	}
	ago := int32(now - last)
	return ago > 0 && time.Duration(uint64(ago)<<policyCTTimeShift) < policyCTClocksStale
}

// policyCTClocksStale is how long after the last round that kept the idle clocks
// a round restarts them: far more than the GC's interval (10 s; a slow round of
// the other tables before it), far less than a rollout that downgrades and
// upgrades again, whose older programs mark no lookups (policyCTClocksFresh).
const policyCTClocksStale = 5 * time.Minute

// noteRound notes GC round at now on slot i, which it read with count seq and
// entry k, v. It restarts the slot's idle clock (born) at now when a lookup
// found it since the last round (SEEN, which it clears, setting ROUND), and at a
// round whose table's clocks are not fresh (first: policyCTClocksFresh; ROUND
// then only for a slot in use); never for an opener-only entry, whose born is
// when its ends went. RESET says whether the entry is marked reset now. The
// programs only ever add IN_USE and SEEN or take IN_USE away, atomically, so a
// compare-and-swap that lost to one is tried again; a SEEN set after it is seen
// by the next round. A slot written whole since seq holds another entry, which
// keeps no RESET of this one.
func (t *policyCTTable) noteRound(i int, seq, now uint32, first bool, k myelinPolicyCtKey, v myelinPolicyCtEntry) {
	s, reset, keep := t.slot(i), policyCTResetMarked(k, v), policyCTOpenerOnly(v)
	for range policyCTTries {
		ref := atomic.LoadUint32(&s.Ref)
		seen := ref&policyCTRefSeen != 0
		next := ref &^ (policyCTRefSeen | policyCTRefReset)
		if seen || (first && ref&policyCTRefInUse != 0) {
			next |= policyCTRefRound
		}
		if reset {
			next |= policyCTRefReset
		}
		restart := (seen || first) && !keep
		if next == ref && !restart {
			break
		}
		if atomic.CompareAndSwapUint32(&s.Ref, ref, next) {
			if restart {
				atomic.StoreUint32(&s.Born, now)
			}
			break
		}
	}
	if reset && atomic.LoadUint32(&s.Seq) != seq {
		for range policyCTTries {
			ref := atomic.LoadUint32(&s.Ref)
			if ref&policyCTRefReset == 0 || atomic.CompareAndSwapUint32(&s.Ref, ref, ref&^policyCTRefReset) {
				break
			}
		}
	}
}

// policyCTResetMarked says whether TCP entry v carries an RST's mark.
func policyCTResetMarked(k myelinPolicyCtKey, v myelinPolicyCtEntry) bool {
	return k.Proto == unix.IPPROTO_TCP && v.Closing&policyCTReset != 0
}

// policyCTRound is what a GC round of myelin_policy_ct knows of itself.
type policyCTRound struct {
	now   uint32 // policyCTUnits of the round's time
	first bool   // the last round is too long ago: every entry's idle clock restarts (noteRound)
	notes bool   // the RESET notes the last round kept count (a grace has passed since)
}

// gcSlot judges slot i, read at seq as live connection k with entry v, in round r:
// it notes the round, empties the slot if the connection idled out, and strips an
// RST-ended entry whose RESET note counts. gone is how many slots it emptied; stays
// says whether the entry is left as it was (then it counts against its pods).
func (t *policyCTTable) gcSlot(i int, seq uint32, k myelinPolicyCtKey, v myelinPolicyCtEntry, r policyCTRound) (gone int, stays bool) {
	s := t.slot(i)
	noted := atomic.LoadUint32(&s.Ref)&policyCTRefReset != 0
	t.noteRound(i, seq, r.now, r.first, k, v)
	born := atomic.LoadUint32(&s.Born)
	if policyCTIdle(k, v, r.now) || policyCTIdleTCP(k, atomic.LoadUint32(&s.Ref), born, r.now) ||
		policyCTOpenerOnlyIdle(v, born, r.now) {
		if t.empty(i, seq) {
			gone++
		}
		return gone, false
	}
	if policyCTResetMarked(k, v) && noted && r.notes && v.Ends&policyCTEnds != 0 {
		t.write(i, seq, func(s *myelinPolicyCtSlot) {
			s.Entry.Closing = 0
			if policyCTStrip(s, policyCTEnds, r.now) {
				gone++
			}
		})
		return gone, false
	}
	return 0, true
}

// GCPolicyCT deletes the myelin_policy_ct entries nothing else frees and returns how
// many, and with a PolicyCTPodMax, lists the pods holding more entries than that in
// myelin_policy_ct_over (policyCTBudget, budget.go). Deleted: connections of other
// protocols than TCP idle longer than PolicyCTTimeoutOther, TCP connections idle past
// theirs (policyCTIdleTCP), entries left with their opener alone older than
// PolicyCTTimeoutOpenerOnly, entries shadowed by a newer one of their tuple
// (policyCTTable.shadowed), and TCP connections an RST ended: marked reset at this
// round and at the last one, at least policyCTResetGrace ago (segments still in
// flight pass, and an RST the receiver ignored is unmarked by the connection's next
// segment). Such a connection's entry keeps its opener alone, as after a purge
// (policyCTStrip): an RST the receiver ignored can't move the charge for the
// connection onto the other end when its next segment tracks it again. The last
// round's finding is kept in the slot (RESET of its ref), so an agent that restarts
// goes on deleting them. at is a time on the MonotonicNow clock.
// Without it, a table full of such entries made every new connection evict one, and
// the LRU evicts the least recently used: the idle long-lived connections, whose next
// reply an egress-isolated server may not send. A slot is emptied only if nothing
// wrote it since it was read (policyCTTable.write); a packet's in-place refresh of its
// last seen between the read and the deletion is lost with it (its next packet is
// judged again).
func (d *Datapath) GCPolicyCT(at time.Duration) (int, error) {
	now := policyCTUnits(at)
	budget := d.policyCTBudget()
	held := podCounts{}
	stuck, wasStuck := map[int]uint32{}, d.policyCTStuck
	removed := 0
	err := d.withPolicyCT(func(t *policyCTTable) error {
		last := atomic.LoadUint32(t.clocks())
		first := !policyCTClocksFresh(last, now)
		// A RESET note counts when the last round kept them (set and cleared) and
		// came a grace before this one.
		notes := !first && atomic.LoadUint32(t.resets()) == last && policyCTResetGraceOver(last, now)
		seed := atomic.LoadUint64(t.seed())
		for i := range t.slots() {
			k, v, seq, busy := t.read(i)
			switch {
			case busy && seq&1 != 0 && wasStuck[i] == seq:
				if t.unstick(i, seq) {
					removed++
				}
			case busy:
				if seq&1 != 0 {
					stuck[i] = seq
				}
			case k.Proto == 0:
			case t.shadowed(seed, i, k):
				if t.empty(i, seq) {
					removed++
				}
			default:
				gone, stays := t.gcSlot(i, seq, k, v, policyCTRound{now: now, first: first, notes: notes})
				removed += gone
				if stays && budget.max != 0 {
					policyCTHeld(held, k, v)
				}
			}
		}
		atomic.StoreUint32(t.resets(), max(now, 1))
		atomic.StoreUint32(t.clocks(), max(now, 1))
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.policyCTStuck = stuck
	return removed, budget.sync(held)
}

// shadowed says whether connection k's entry in slot i is behind another copy
// of k in the order the programs read its buckets (policy_ct_find_at finds
// that one): an older connection of the same tuple, whose SYN's fresh entry
// took an empty slot before it without reading on (policy_ct_put), or a copy
// two checks wrote at once. It reads the slots before i only, allocating
// nothing: the GC asks it of every entry.
func (t *policyCTTable) shadowed(seed uint64, i int, k myelinPolicyCtKey) bool {
	b := policyCTBucketsOf(seed, t.buckets, k)
	for c, bucket := range b {
		if slices.Contains(b[:c], bucket) {
			continue
		}
		for w := range policyCTWays {
			j := int(bucket)*policyCTWays + w
			if j == i {
				return false
			}
			if sk, _, _, busy := t.read(j); !busy && sk == k {
				return true
			}
		}
	}
	return false
}

// policyCTResetGrace is how long after a GC round that found a TCP entry marked
// reset a round that finds it still marked deletes it: segments in flight pass
// meanwhile. Less than the GC's interval (10 s), so the next round of a running
// agent deletes it; a restarted agent's round that comes sooner waits for the
// one after.
const policyCTResetGrace = 5 * time.Second

// policyCTResetGraceOver says whether a GC round at now (policyCTUnits) comes at
// least policyCTResetGrace after the last round, at last. Both are whole units
// of a clock read later: the two times lie more than one unit less apart than
// their units say.
func policyCTResetGraceOver(last, now uint32) bool {
	return policyCTSince(last+1, now) >= policyCTResetGrace
}

// policyCTStrip takes the end bits gone away from slot s at now (policyCTUnits),
// with their OUT and IN bits, in a write under its count (policyCTTable.write), and
// says whether it emptied the slot. An entry left without an end's bit keeps
// its opener, if it has one, with the rest of the entry, for
// PolicyCTTimeoutOpenerOnly from now (born; ref's marks and notes start over),
// else is emptied.
func policyCTStrip(s *myelinPolicyCtSlot, gone, now uint32) bool {
	if s.Entry.Ends &^= gone | policyCTViaOf(gone); s.Entry.Ends&policyCTEnds != 0 {
		return false
	}
	if s.Entry.Ends&policyCTOpened == 0 {
		s.Key, s.Entry = myelinPolicyCtKey{}, myelinPolicyCtEntry{}
		return true
	}
	atomic.StoreUint32(&s.Born, now)
	atomic.StoreUint32(&s.Ref, 0)
	return false
}

// policyCTHeld counts entry k, v against the pod that pays for it, as the
// datapath asks when it writes one (lib/policy_ct.h, policy_ct_opener): the end
// the entry names as its opener (a pod whose source a node checked: one of this
// node, in tunnel mode one of another node), else each end whose bit it carries
// (the pods of this node that accepted the connection; policy_ct_key_of: the lo
// bit is addr_lo's). So a pod that floods a pod of this node its policy admits
// fills its own budget, not the target's. An opener kept alone (after a purge or
// an RST) counts against nobody: it tracks no connection, a new one replaces it
// before any other (policy_ct_put), and it is gone within
// PolicyCTTimeoutOpenerOnly unless the connection is tracked again, counted then.
func policyCTHeld(h podCounts, k myelinPolicyCtKey, v myelinPolicyCtEntry) {
	switch {
	case v.Ends&policyCTEnds == 0:
	case v.Ends&policyCTOpenedLo != 0:
		h[k.AddrLo]++
	case v.Ends&policyCTOpenedHi != 0:
		h[k.AddrHi]++
	default:
		if v.Ends&policyCTEndLo != 0 {
			h[k.AddrLo]++
		}
		if v.Ends&policyCTEndHi != 0 {
			h[k.AddrHi]++
		}
	}
}

// PolicyCTEvictions are the connections new ones pushed out of myelin_policy_ct
// (its buckets full: lib/policy_ct_write.h, policy_ct_put), summed over CPUs,
// since the node first loaded a datapath with myelin_policy_ct_stats (a pinned
// map: agent restarts and table resizes keep the counts). The next packet of a
// connection pushed out is judged by the policy again: allowed, it is tracked
// again; a reply the receiving pod's own policy doesn't allow is dropped as
// POLICY_DENIED.
type PolicyCTEvictions struct {
	// Idle had seen no packet since their buckets last made room: a flood's
	// one-off datagrams, connections gone quiet.
	Idle uint64
	// InUse had seen one (every slot of both buckets had): live connections;
	// any at all means policy-ct-max is too small for the node's connections.
	InUse uint64
}

// PolicyCTEvictions reads myelin_policy_ct_stats.
func (d *Datapath) PolicyCTEvictions() (PolicyCTEvictions, error) {
	var ev PolicyCTEvictions
	dsts := [myelinPolicyCtStatPOLICY_CT_STAT_MAX]*uint64{
		myelinPolicyCtStatPOLICY_CT_STAT_EVICTED_IDLE:   &ev.Idle,
		myelinPolicyCtStatPOLICY_CT_STAT_EVICTED_IN_USE: &ev.InUse,
	}
	if err := sumPerCPU(d.objs.MyelinPolicyCtStats, "myelin_policy_ct_stats", dsts[:]...); err != nil {
		return PolicyCTEvictions{}, err
	}
	return ev, nil
}
