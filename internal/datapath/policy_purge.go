package datapath

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
)

// PolicyCTPurge names the tracked connections to forget: those of local
// pods whose policy changed (Endpoints) and those with a peer whose identity
// may have changed: its /32 was added, removed or changed in myelin_ipcache
// (Peers), or it lies in a wider prefix that was (Prefixes). Gone are the
// Peers whose /32 left myelin_ipcache (a pod deleted): an entry with an end at
// one of them is emptied, opener and all, as nobody sends on it any more.
//
// Allowed, when set, judges again the ends named for their pod's policy
// (Endpoints) or for a prefix holding the peer (Prefixes), as the maps now
// are, in the direction the end's check accepted it (enum policy_ct_ends,
// IN and OUT): an end whose bit came from its ingress check keeps it if the
// new state allows its peer to open the connection (the peer to the end's
// port: the peer could have the bit set again by sending, so keeping it
// grants nothing more); one whose bit came from its egress check if the new
// state allows the end to open it (the end to the peer's port), and only
// then (an egress rule tightened cuts what a pod sends on a connection it
// opened until its peer sends again, as before). An end with neither bit
// (written by older programs) is forgotten.
// So connections the change still allows go on passing both ways: a server's
// push after a rollout of an allowed client changed the server's entries, a
// stream into a client whose ingress entries changed, a reply out of a pod
// that just became egress-isolated. Ends named for an address whose /32
// changed (Peers: it may be another pod's now) are forgotten whatever it says.
type PolicyCTPurge struct {
	Endpoints map[netip.Addr]bool
	Peers     map[netip.Addr]bool
	Prefixes  []netip.Prefix
	Gone      map[netip.Addr]bool
	Allowed   func(PolicyCTEnd) bool
}

// PolicyCTEnd is one end of a tracked connection as PolicyCTPurge.Allowed
// is asked about it: would the check of local pod Local allow a new
// connection of it opened by Local (Egress: to PeerPort) or by Peer (to
// LocalPort)?
type PolicyCTEnd struct {
	Local, Peer         netip.Addr
	LocalPort, PeerPort uint16 // host order; 0 for protocols without ports
	Proto               uint8
	Egress              bool
}

// Empty says there is nothing to purge.
func (p PolicyCTPurge) Empty() bool {
	return len(p.Endpoints) == 0 && len(p.Peers) == 0 && len(p.Prefixes) == 0 && len(p.Gone) == 0
}

// PurgePolicyCT forgets the myelin_policy_ct entries p names (one pass
// over the table): an entry loses the bits of the noted ends p names but
// those p.Allowed allows again, and their next packet is judged by the
// policy again at that end. An entry
// left without an end's bit keeps its opener (who pays for it: policyCTHeld)
// for PolicyCTTimeoutOpenerOnly, so the packet the policy allows that tracks
// it again meanwhile, whoever sends it (a server's push or keepalive on a
// connection a client of this node opened), leaves the opener paying for it,
// not that sender (lib/policy_ct.h, policy_ct_track: only a SYN that starts
// a connection names a new opener); such an entry allows nothing. An entry
// with an end p names Gone (its pod deleted: nobody sends on it any more), or
// left with neither an end nor an opener, is emptied. Each slot is changed
// only if nothing wrote it since it was read (policyCTTable.write), so a bit
// the datapath cleared or an entry a SYN restarted is never brought back; a
// slot written meanwhile is read and judged again. It returns how many
// entries it changed.
func (d *Datapath) PurgePolicyCT(p PolicyCTPurge) (int, error) {
	if p.Empty() {
		return 0, nil
	}
	n, stuck, now := 0, 0, policyCTUnits(MonotonicNow())
	err := d.withPolicyCT(func(t *policyCTTable) error {
		for i := range t.slots() {
			changed, ok := purgePolicyCTSlot(t, i, p, now)
			if !ok {
				stuck++
			}
			if changed {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if stuck != 0 {
		return n, fmt.Errorf("forget tracked policy connections: %d slots of myelin_policy_ct stay in a write (a writer died holding them: they allow nothing; GCPolicyCT frees them)", stuck)
	}
	return n, nil
}

// policyCTTries bounds how often a slot is read again because a program wrote
// it meanwhile: each write takes nanoseconds, so only a slot left odd for good
// (a writer that died holding it, which no program reads) runs out of them.
const policyCTTries = 1000

// purgePolicyCTSlot drops the ends of slot i that p names, reading it again
// while programs write it; ok is false for a slot that stayed in a write
// (passed over: the rest of the pass goes on).
func purgePolicyCTSlot(t *policyCTTable, i int, p PolicyCTPurge, now uint32) (changed, ok bool) {
	for range policyCTTries {
		k, v, seq, busy := t.read(i)
		if busy {
			runtime.Gosched()
			continue
		}
		gone := policyCTForget(k, v.Ends, p)
		if gone == 0 {
			return false, true
		}
		if t.write(i, seq, func(s *myelinPolicyCtSlot) { policyCTStrip(s, gone, now) }) {
			return true, true
		}
	}
	return false, false
}

// The end bits of a tracked connection, and its opener's (enum policy_ct_ends).
const (
	policyCTEndLo    = uint32(myelinPolicyCtEndsPOLICY_CT_END_LO)
	policyCTEndHi    = uint32(myelinPolicyCtEndsPOLICY_CT_END_HI)
	policyCTEnds     = policyCTEndLo | policyCTEndHi
	policyCTOpenedLo = uint32(myelinPolicyCtEndsPOLICY_CT_OPENED_LO)
	policyCTOpenedHi = uint32(myelinPolicyCtEndsPOLICY_CT_OPENED_HI)
	policyCTOpened   = policyCTOpenedLo | policyCTOpenedHi
	policyCTOutLo    = uint32(myelinPolicyCtEndsPOLICY_CT_OUT_LO)
	policyCTOutHi    = uint32(myelinPolicyCtEndsPOLICY_CT_OUT_HI)
	policyCTInLo     = uint32(myelinPolicyCtEndsPOLICY_CT_IN_LO)
	policyCTInHi     = uint32(myelinPolicyCtEndsPOLICY_CT_IN_HI)
	policyCTHostPeer = uint32(myelinPolicyCtEndsPOLICY_CT_HOST_PEER)
)

// policyCTOutOf and policyCTInOf are the OUT and IN bits of the end bits in
// ends; policyCTViaOf both.
func policyCTOutOf(ends uint32) uint32 { return policyCTPerEnd(ends, policyCTOutLo, policyCTOutHi) }
func policyCTInOf(ends uint32) uint32  { return policyCTPerEnd(ends, policyCTInLo, policyCTInHi) }
func policyCTViaOf(ends uint32) uint32 { return policyCTOutOf(ends) | policyCTInOf(ends) }

func policyCTPerEnd(ends, lo, hi uint32) uint32 {
	var out uint32
	if ends&policyCTEndLo != 0 {
		out |= lo
	}
	if ends&policyCTEndHi != 0 {
		out |= hi
	}
	return out
}

// policyCTForget returns the end bits p takes from entry k, whose ends bits
// are ends: every end and the opener when an address of it is Gone, else the
// noted ends p names (policyCTMatches) but those p.Allowed allows again.
func policyCTForget(k myelinPolicyCtKey, ends uint32, p PolicyCTPurge) uint32 {
	es := policyCTEndsOf(k)
	if p.Gone[es[0].local] || p.Gone[es[1].local] {
		return policyCTEnds | policyCTOpened
	}
	sure, judge := policyCTMatches(es, ends, p)
	for _, e := range es {
		if judge&e.bit != 0 && policyCTAllowedAgain(e, ends, p.Allowed) {
			judge &^= e.bit
		}
	}
	return sure | judge
}

// policyCTEnd is one end of a tracked connection's key: its bit, its local
// pod and port, its peer and port (host order).
type policyCTEnd struct {
	bit                 uint32
	local, peer         netip.Addr
	localPort, peerPort uint16
	proto               uint8
}

func policyCTEndsOf(k myelinPolicyCtKey) [2]policyCTEnd {
	lo, hi := u32Addr(k.AddrLo), u32Addr(k.AddrHi)
	plo, phi := ntohs(k.PortLo), ntohs(k.PortHi)
	return [2]policyCTEnd{
		{policyCTEndLo, lo, hi, plo, phi, k.Proto},
		{policyCTEndHi, hi, lo, phi, plo, k.Proto},
	}
}

// policyCTMatches returns the noted ends (of an entry whose ends es are)
// that p names: sure, those it forgets whatever the new state allows (the
// end's own address or its peer's is a purged /32: it may be another pod's
// now), and judge, the others it names (the end's pod is a purged endpoint,
// or its peer lies in a purged prefix), which p.Allowed may keep.
func policyCTMatches(es [2]policyCTEnd, ends uint32, p PolicyCTPurge) (sure, judge uint32) {
	for _, e := range es {
		switch {
		case ends&e.bit == 0:
		case p.Peers[e.peer] || p.Peers[e.local]:
			sure |= e.bit
		case p.Endpoints[e.local] || slices.ContainsFunc(p.Prefixes, func(pfx netip.Prefix) bool { return pfx.Contains(e.peer) }):
			judge |= e.bit
		}
	}
	return sure, judge
}

// policyCTAllowedAgain asks allowed (nil: nothing is) whether end e of an
// entry whose ends bits are ends may stay, in the direction its check
// accepted it: the end may open the connection if its bit came from its
// egress check (OUT), the peer may if from its ingress check (IN). An end
// with neither (written by older programs) is not asked. An IN end of a
// connection the host's exemption let in (POLICY_CT_HOST_PEER: the peer is
// this node's stack, exempt whatever the policy says) stays without asking
// whenever allowed is set: the host's next packet would track it again, and
// until then the pod's own packets on it would be judged as new.
func policyCTAllowedAgain(e policyCTEnd, ends uint32, allowed func(PolicyCTEnd) bool) bool {
	out, in := ends&policyCTOutOf(e.bit) != 0, ends&policyCTInOf(e.bit) != 0
	if allowed == nil || out == in {
		return false
	}
	return (in && ends&policyCTHostPeer != 0) || allowed(PolicyCTEnd{Local: e.local, Peer: e.peer,
		LocalPort: e.localPort, PeerPort: e.peerPort, Proto: e.proto, Egress: out})
}
