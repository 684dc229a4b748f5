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
type idSet struct {
	used       map[uint32]bool
	freed      []freedID // oldest first
	last       uint32
	quarantine time.Duration
	now        func() time.Time
}

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
// new one.
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
