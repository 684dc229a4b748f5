package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// firstIdentity is the first number given to a peer; below are reserved
// (0 any peer, 2 world; docs/policy.md).
const firstIdentity = 256

// worldKey is the identity key of an address no policy CIDR contains.
const worldKey = "cidr"

// Identities allocates node-local identity numbers to identity keys and
// keeps them stable across computations (and, saved, across restarts), so
// an unchanged cluster rewrites nothing.
type Identities struct {
	ids   map[string]uint32
	taken map[uint32]bool // the numbers ids holds
	// pinned are numbers a previous agent's pinned maps hold (Reserve): never given.
	pinned map[uint32]bool
	next   uint32
	// changed says the allocator differs from what Save wrote (or Load read)
	// last: every computation saves it, and most change nothing.
	changed bool
	// fresh says no saved allocator was read (NewIdentities, or no file).
	fresh bool
}

// NewIdentities returns an empty allocator.
func NewIdentities() *Identities {
	return &Identities{ids: map[string]uint32{worldKey: 2}, taken: map[uint32]bool{2: true}, next: firstIdentity, changed: true, fresh: true}
}

// Fresh says the allocator was not read from a saved file: numbers a previous
// agent gave may still be in the datapath's pinned maps (see Above).
func (s *Identities) Fresh() bool { return s.fresh }

// Above makes every number given from now on greater than n: a fresh allocator
// next to pinned maps that hold numbers up to n must not give one of them to
// another key, or the maps' old entries would mean that key's allows until the
// apply rewrites them.
func (s *Identities) Above(n uint32) {
	if n >= s.next {
		s.next = max(n+1, firstIdentity) // n+1 wraps to 0 at the top
		s.changed = true
	}
}

// Reserve keeps numbers from being given: those the pinned maps hold at the agent's
// start (after the counter has wrapped, neither Above nor a file saved before an apply
// finished keeps it off them).
func (s *Identities) Reserve(numbers []uint32) {
	if s.pinned == nil {
		s.pinned = map[uint32]bool{}
	}
	for _, n := range numbers {
		s.pinned[n] = true
	}
}

// Next is the number the next new key gets.
func (s *Identities) Next() uint32 { return s.next }

func (s *Identities) get(key string) uint32 {
	if id, ok := s.ids[key]; ok {
		return id
	}
	id := s.take()
	s.ids[key], s.taken[id] = id, true
	s.changed = true
	return id
}

// take returns the next number no key holds, from next on: past the top of uint32
// it wraps to firstIdentity, never to a reserved number (0 is any peer: a wrapped
// counter gave pods the wildcard), and it passes over numbers keys still hold (after a
// wrap, a long-lived key's). A number released a moment ago (the datapath may still
// hold it during an apply) comes back only after every other number has been given:
// 2^32 - 256 of them, unless the counter has wrapped (then a key released just ahead
// of it can have its number given in the next computation: after 2^32 numbers). No
// more keys than numbers exist (the cluster's pods and CIDRs).
func (s *Identities) take() uint32 {
	for {
		id := s.next
		s.next++
		if s.next < firstIdentity { // wrapped
			s.next = firstIdentity
		}
		if id >= firstIdentity && !s.taken[id] && !s.pinned[id] {
			return id
		}
	}
}

// release forgets the keys not in used (never world). Their numbers are given
// again only once the counter has come round (take).
func (s *Identities) release(used map[string]bool) {
	for k, id := range s.ids {
		if k != worldKey && !used[k] {
			delete(s.ids, k)
			delete(s.taken, id)
			s.changed = true
		}
	}
}

// Len is the number of identities allocated.
func (s *Identities) Len() int { return len(s.ids) }

type identitiesFile struct {
	Next uint32            `json:"next"`
	IDs  map[string]uint32 `json:"ids"`
}

// LoadIdentities reads the allocator saved at path; a missing file is a
// new allocator.
func LoadIdentities(path string) (*Identities, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NewIdentities(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read policy identities: %w", err)
	}
	var f identitiesFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parse policy identities %s: %w (delete it: the agent then renumbers and rewrites the policy maps)", path, err)
	}
	s := NewIdentities()
	for k, v := range f.IDs {
		if v < firstIdentity && k != worldKey {
			continue // reserved (an older agent's counter overflowed): numbered again
		}
		s.ids[k], s.taken[v] = v, true
		if v >= s.next && v != ^uint32(0) {
			s.next = v + 1 // a file without "next": after the numbers it holds
		}
	}
	if f.Next >= firstIdentity { // the counter as saved (after a wrap, below numbers held)
		s.next = f.Next
	}
	s.changed, s.fresh = false, false
	return s, nil
}

// Save writes the allocator to path atomically (rename), unless nothing changed
// since it was last saved or loaded.
func (s *Identities) Save(path string) error {
	if !s.changed {
		return nil
	}
	b, err := json.Marshal(identitiesFile{Next: s.next, IDs: s.ids})
	if err != nil {
		return fmt.Errorf("encode policy identities: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write policy identities: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write policy identities: %w", err)
	}
	s.changed = false
	return nil
}
