package service

import (
	"errors"
	"math"
	"time"
)

// errIDsExhausted means every id is in use or quarantined; the maps are far smaller,
// so it is a bug.
var errIDsExhausted = errors.New("no free id left")

// idSet hands out ids >= 1. A freed id stays out of use for the quarantine, the
// longest a Service conntrack entry can outlive its last packet
// (datapath.ServiceCTMaxTimeout): entries name backends and services by id, and an id
// reused sooner could send a flow to another Service's pod. (The datapath also
// checks a flow's backend address and service id, which covers flows that stay busy
// for longer.) Not safe for concurrent use.
//
// What it keeps is bounded by the ids in use and the ids flows name, not by churn: a
// tenant flipping a Service's 65,000 externalIP frontends on and off every second
// freed 65,000 ids a second, each kept for the 6 h quarantine (34 B each: GBs), and
// took as many new ones (the id space ran out within a day). Once freedMax ids
// wait, the Manager asks conntrack which ids flows name (settle): the others are
// ready at once, and next hands them out before any new id.
type idSet struct {
	used       map[uint32]bool
	freed      []freedID // oldest first
	ready      []uint32  // freed ids no conntrack entry named when last asked (settle)
	last       uint32
	quarantine time.Duration
	now        func() time.Time
	// settleAt is the len(freed) past which the Manager settles it (crowded):
	// freedMax, or twice what conntrack named the last time.
	settleAt int
}

// freedMax is how many ids may wait out their quarantine before conntrack is asked
// which of them flows still name: at ~32 B each, 2 MB a set.
const freedMax = 1 << 16

// freedID is an id in quarantine since at.
type freedID struct {
	id uint32
	at time.Time
}

func newIDSet(quarantine time.Duration) idSet {
	return idSet{used: map[uint32]bool{}, quarantine: quarantine, now: time.Now}
}

// take marks id used (an id adopted from the maps).
func (s *idSet) take(id uint32) {
	s.used[id] = true
	s.last = max(s.last, id)
}

// hold puts an unused id in quarantine from now (an id that conntrack entries
// name, found at start).
func (s *idSet) hold(id uint32) {
	if s.used[id] {
		return
	}
	s.freed = append(s.freed, freedID{id: id, at: s.now()})
	s.last = max(s.last, id)
}

// next returns an unused id: the oldest freed one whose quarantine is over, else a
// ready one, else a new one.
func (s *idSet) next() (uint32, error) {
	now := s.now()
	for len(s.freed) > 0 && now.Sub(s.freed[0].at) >= s.quarantine {
		id := s.freed[0].id
		s.freed = s.freed[1:]
		if !s.used[id] {
			s.used[id] = true
			return id, nil
		}
	}
	for len(s.ready) > 0 {
		id := s.ready[len(s.ready)-1]
		s.ready = s.ready[:len(s.ready)-1]
		if !s.used[id] {
			s.used[id] = true
			return id, nil
		}
	}
	for s.last < math.MaxUint32 {
		s.last++
		if !s.used[s.last] {
			s.used[s.last] = true
			return s.last, nil
		}
	}
	return 0, errIDsExhausted
}

// free puts id in quarantine.
func (s *idSet) free(id uint32) {
	if s.used[id] {
		delete(s.used, id)
		s.freed = append(s.freed, freedID{id: id, at: s.now()})
	}
}

// quarantined reports whether id is waiting out its quarantine.
func (s *idSet) quarantined(id uint32) bool {
	for _, f := range s.freed {
		if f.id == id {
			return true
		}
	}
	return false
}

// crowded reports whether so many ids wait in quarantine that the Manager should
// settle them.
func (s *idSet) crowded() bool { return len(s.freed) >= max(s.settleAt, freedMax) }

// settle ends the quarantine of the freed ids that named (what conntrack entries
// name now) does not hold: no flow can be sent by them to another Service's pod, so
// they are ready. The next settle waits until twice as many ids wait as named kept.
func (s *idSet) settle(named []uint32) {
	keep := make(map[uint32]bool, len(named))
	for _, id := range named {
		keep[id] = true
	}
	var held []freedID
	for _, f := range s.freed {
		switch {
		case s.used[f.id]:
		case keep[f.id]:
			held = append(held, f)
		default:
			s.ready = append(s.ready, f.id)
		}
	}
	s.freed = held
	s.settleAt = 2 * len(held)
}

// postpone makes the next settle wait until twice as many ids wait: conntrack could
// not be read.
func (s *idSet) postpone() { s.settleAt = 2 * len(s.freed) }
