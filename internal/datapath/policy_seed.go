package datapath

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PolicyCTSeeded is what SeedPolicyCT did.
type PolicyCTSeeded struct {
	// Written is how many entries it wrote (new ones and ends added).
	Written int
	// Full is how many connections found their buckets full: not tracked, their
	// packets are judged as new traffic (as without seeding).
	Full int
	// Stuck is how many found a slot left in a write (a writer died holding it).
	Stuck int
}

// SeedPolicyCT tracks connections a local pod holds open as if its check had
// accepted them: end e's check of the direction e.Egress names (its egress
// check: the pod opened the connection; else its ingress check: the peer
// did). The agent calls it with the connections of a pod about to be
// isolated for the first time (docs/policy.md, "Connections open before
// isolation"), and its apply's purge then judges them against the new policy
// in that direction: those it allows pass as a tracked connection's instead of
// being judged as new. An entry the connection already has gets the end's bit
// added (and the pod as its opener when it opened it and the entry names
// none); a new one takes an empty slot of its buckets, as the programs' write
// would, marked as carrying traffic; a connection whose buckets are full is
// left untracked (Full). Each slot is written only if nothing wrote it since
// it was read (policyCTTable.write).
func (d *Datapath) SeedPolicyCT(ends []PolicyCTEnd) (PolicyCTSeeded, error) {
	var out PolicyCTSeeded
	if len(ends) == 0 {
		return out, nil
	}
	now := policyCTUnits(MonotonicNow())
	err := d.withPolicyCT(func(t *policyCTTable) error {
		for _, e := range ends {
			if !e.Local.Is4() || !e.Peer.Is4() {
				return fmt.Errorf("seed tracked connection %v: not IPv4", e)
			}
			switch seedPolicyCTEnd(t, d.policyCTSeed, e, now) {
			case seedWritten:
				out.Written++
			case seedFull:
				out.Full++
			case seedStuck:
				out.Stuck++
			}
		}
		return nil
	})
	return out, err
}

type seedOutcome int

const (
	seedKept    seedOutcome = iota // the end was tracked already
	seedWritten                    // its bit added, or a new entry
	seedFull                       // no empty slot in its buckets
	seedStuck                      // a slot stayed in a write
)

// policyCTKeyOfEnd is policy_ct_key_set for end e as the local source: the
// connection's key and e's bit in it.
func policyCTKeyOfEnd(e PolicyCTEnd) (myelinPolicyCtKey, uint32) {
	l, p := addrU32(e.Local.As4()), addrU32(e.Peer.As4())
	lp, pp := htons(e.LocalPort), htons(e.PeerPort)
	if l < p || (l == p && lp <= pp) {
		return myelinPolicyCtKey{AddrLo: l, AddrHi: p, PortLo: lp, PortHi: pp, Proto: e.Proto}, policyCTEndLo
	}
	return myelinPolicyCtKey{AddrLo: p, AddrHi: l, PortLo: pp, PortHi: lp, Proto: e.Proto}, policyCTEndHi
}

// policyCTSeedBits are the end bits a seed of e (whose bit is bit) sets: the
// end, the check that accepted it, and the end as its opener when it opened
// the connection (it pays for the entry, as for a SYN it sends).
func policyCTSeedBits(e PolicyCTEnd, bit uint32) (ends, opened uint32) {
	if e.Egress {
		opened = policyCTOpenedLo
		if bit == policyCTEndHi {
			opened = policyCTOpenedHi
		}
		return bit | policyCTOutOf(bit), opened
	}
	return bit | policyCTInOf(bit), 0
}

// seedPolicyCTEnd writes the seed of e into t (hashed with seed) at now
// (policyCTUnits), reading a slot again while programs write it.
func seedPolicyCTEnd(t *policyCTTable, seed uint64, e PolicyCTEnd, now uint32) seedOutcome {
	k, bit := policyCTKeyOfEnd(e)
	ends, opened := policyCTSeedBits(e, bit)
	for range policyCTTries {
		i, v, seq, ok, busy := t.lookup(seed, k)
		if ok {
			if v.Ends&bit != 0 {
				return seedKept
			}
			if t.write(i, seq, func(s *myelinPolicyCtSlot) {
				s.Entry.Ends = s.Entry.Ends&^policyCTViaOf(bit) | ends
				if s.Entry.Ends&policyCTOpened == 0 {
					s.Entry.Ends |= opened
				}
			}) {
				return seedWritten
			}
			continue
		}
		if busy {
			continue // a slot being written may be the connection's own copy
		}
		v = myelinPolicyCtEntry{Ends: ends | opened}
		if k.Proto != unix.IPPROTO_TCP {
			v.FinLo = now // last seen
		}
		switch placed, busy := t.place(seed, k, v, now); {
		case placed:
			return seedWritten
		case !busy:
			return seedFull
		}
	}
	return seedStuck
}
