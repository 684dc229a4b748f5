package service

import (
	"errors"
	"math"
)

// errIDsExhausted means every id is in use; the maps are far smaller, so it is a bug.
var errIDsExhausted = errors.New("no free id left")

// idSet hands out ids >= 1, reusing freed ones first. Not safe for concurrent use.
type idSet struct {
	used  map[uint32]bool
	freed []uint32
	last  uint32
}

func newIDSet() idSet { return idSet{used: map[uint32]bool{}} }

// take marks id used (an id adopted from the maps).
func (s *idSet) take(id uint32) {
	s.used[id] = true
	s.last = max(s.last, id)
}

// next returns an unused id.
func (s *idSet) next() (uint32, error) {
	for len(s.freed) > 0 {
		id := s.freed[len(s.freed)-1]
		s.freed = s.freed[:len(s.freed)-1]
		if !s.used[id] {
			s.used[id] = true
			return id, nil
		}
	}
	if s.last == math.MaxUint32 {
		return 0, errIDsExhausted
	}
	s.last++
	s.used[s.last] = true
	return s.last, nil
}

// free returns id to the set.
func (s *idSet) free(id uint32) {
	if s.used[id] {
		delete(s.used, id)
		s.freed = append(s.freed, id)
	}
}
