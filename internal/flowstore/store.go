package flowstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/myelin-net/myelin/internal/flow"
)

// DefaultCapacity is how many flows a node keeps (config key
// hubble-event-buffer-capacity), Hubble's default.
const DefaultCapacity = 4095

// followBuffer is how many flows a follower may fall behind before it loses flows.
const followBuffer = 1024

// MaxFollowers is how many follow streams (hubble observe --follow, the relay) a node
// serves at once; one more is refused with ErrTooManyFollowers, so readers cannot make
// every flow cost unbounded filter work.
const MaxFollowers = 64

// ErrTooManyFollowers is what Flows returns (wrapped) for a follow request beyond
// MaxFollowers.
var ErrTooManyFollowers = errors.New("too many follow streams")

// Store keeps a node's newest flows and hands them to readers and sinks. Safe for
// concurrent use. The zero value is not usable; use New.
type Store struct {
	// fanMu serializes Add: taken before mu and held while the followers' filters run
	// after mu is released, so followers see flows in store order and readers, Stats
	// and new followers never wait for filters.
	fanMu    sync.Mutex
	mu       sync.Mutex
	ring     []flow.Flow // values, grown up to capacity; next is the oldest once full
	capacity int
	next     int
	full     bool
	// followers is replaced, never changed in place, when one comes or goes, so Add
	// takes it under mu and runs the filters on it after mu is released.
	followers []*follower
	sinks     []flow.Sink
	added     uint64
}

// New returns a store that keeps the newest capacity flows (DefaultCapacity if < 1).
func New(capacity int) *Store {
	if capacity < 1 {
		capacity = DefaultCapacity
	}
	return &Store{capacity: capacity}
}

// AddSink registers s to see every flow added from now on, in order, a batch at a
// time. s.Observe runs on the adding goroutine under the store's lock: it must not
// block.
func (s *Store) AddSink(sink flow.Sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinks = append(s.sinks, sink)
}

// Add stores a copy of f, as AddBatch does a batch of one; the caller keeps f.
func (s *Store) Add(f *flow.Flow) {
	s.AddBatch([]flow.Flow{*f})
}

// AddBatch stores copies of fs in order, hands fs to the sinks and each flow to every
// follower that keeps up (followers get one shared heap copy, made only when one wants
// it). The caller keeps fs and may reuse it once AddBatch returns: the agent converts
// what it finds in the datapath's ring into one reused batch, so a record costs no
// allocation unless a follower takes it (docs/bench/2026-11-23/flows-3), and the
// store's and the sinks' locks are taken once per batch, not per record. Followers'
// filters run outside the store's lock, so readers and Stats never wait for them.
func (s *Store) AddBatch(fs []flow.Flow) {
	s.fanMu.Lock()
	defer s.fanMu.Unlock()
	s.mu.Lock()
	for i := range fs {
		if len(s.ring) < s.capacity { // not full yet: next is len(s.ring)
			s.ring = append(s.ring, fs[i])
		} else {
			s.ring[s.next] = fs[i]
		}
		s.next++
		if s.next == s.capacity {
			s.next, s.full = 0, true
		}
	}
	s.added += uint64(len(fs))
	for _, sink := range s.sinks {
		sink.Observe(fs)
	}
	followers := s.followers
	s.mu.Unlock()
	if len(followers) == 0 {
		return
	}
	for i := range fs {
		f := &fs[i]
		var shared *flow.Flow
		for _, fo := range followers {
			if !fo.req.Match(f) {
				continue
			}
			if shared == nil {
				c := *f
				shared = &c
			}
			fo.offer(shared)
		}
	}
}

// Stats are the store's counters, for status and metrics.
type Stats struct {
	Capacity  int    // flows kept at most
	Stored    int    // flows kept now
	Added     uint64 // flows added since start
	Followers int    // live followers
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Capacity: s.capacity, Stored: len(s.ring), Added: s.added, Followers: len(s.followers)}
	return st
}

// stored returns the i-th newest stored flow (0: the newest), i < len(s.ring).
func (s *Store) stored(i int) *flow.Flow {
	j := s.next - 1 - i
	if j < 0 {
		j += len(s.ring)
	}
	return &s.ring[j]
}

// Flows implements flow.Source: the newest req.Last stored flows that match req
// (all matching ones when not following and Last is 0), then with req.Follow every
// new matching flow until ctx ends. It returns nil when it has sent what was asked,
// ctx's error when ctx ended first (nil for a follow stream, which ends only so).
func (s *Store) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	s.mu.Lock()
	stored := s.lastMatching(req)
	var fo *follower
	if req.Follow { // registered under the same lock: no flow falls between the two parts
		if len(s.followers) >= MaxFollowers {
			s.mu.Unlock()
			return fmt.Errorf("follow flows: %w: this node serves at most %d at once; stop another `hubble observe --follow` or use the relay",
				ErrTooManyFollowers, MaxFollowers)
		}
		fo = &follower{req: req, ch: make(chan *flow.Flow, followBuffer)}
		s.followers = append(slices.Clip(s.followers), fo)
	}
	s.mu.Unlock()
	if fo != nil {
		defer s.unfollow(fo)
	}
	for _, f := range stored {
		select {
		case out <- f:
		case <-ctx.Done():
			return s.endErr(ctx, req)
		}
	}
	if fo == nil {
		return nil
	}
	return fo.run(ctx, out)
}

func (s *Store) endErr(ctx context.Context, req flow.Request) error {
	if req.Follow {
		return nil
	}
	return ctx.Err()
}

func (s *Store) unfollow(fo *follower) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followers = slices.DeleteFunc(slices.Clone(s.followers), func(f *follower) bool { return f == fo })
}

// lastMatching returns copies of the stored flows req asks for, oldest first (under
// s.mu: only the matches are copied out of the ring).
func (s *Store) lastMatching(req flow.Request) []*flow.Flow {
	limit := req.Last
	if limit == 0 && req.Follow {
		return nil
	}
	var idx []int
	for i := 0; i < len(s.ring) && (limit == 0 || len(idx) < limit); i++ {
		if f := s.stored(i); f.Type != flow.TypeLost && req.Match(f) {
			idx = append(idx, i)
		}
	}
	copies := make([]flow.Flow, len(idx))
	out := make([]*flow.Flow, len(idx))
	for k, i := range idx {
		n := len(idx) - 1 - k // oldest first
		copies[n] = *s.stored(i)
		out[n] = &copies[n]
	}
	return out
}
