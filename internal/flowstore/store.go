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

// historyChunk is how many stored flows a reader copies out of the ring per turn of
// s.mu: its filters run on the copies, after the lock is released, so adders and
// other readers wait for a copy of at most this many flows (~5 µs), never for a
// reader's filters.
const historyChunk = 256

// MaxFollowers is how many follow streams (hubble observe --follow, the relay) a node
// serves at once; one more is refused with ErrTooManyFollowers, so readers cannot make
// every flow cost unbounded filter work.
const MaxFollowers = 64

// ErrTooManyFollowers is what Flows returns (wrapped) for a follow request beyond
// MaxFollowers over the network, or MaxFollowers+LocalFollowers in all.
var ErrTooManyFollowers = errors.New("too many follow streams")

// LocalFollowers is how many follow streams a node keeps for its own sockets (root's
// `myelin observe --follow`, hubble on the node, `myelin ui` reading the node:
// requests whose context Local marks) beyond MaxFollowers: streams over the network
// (the relay, which the service map's viewers reach unauthenticated, each a follower
// of every node) can take MaxFollowers at most and hold them while their filters
// match nothing, and an operator on the node must still see the flows during an
// incident (found by the attacker review of 2026-12-06). Local streams take any of
// the MaxFollowers+LocalFollowers slots, network ones MaxFollowers at most.
const LocalFollowers = 8

type localKey struct{}

// Local returns ctx marked as a request of the node's own sockets (LocalFollowers).
func Local(ctx context.Context) context.Context { return context.WithValue(ctx, localKey{}, true) }

func isLocal(ctx context.Context) bool { return ctx.Value(localKey{}) != nil }

// MaxHistoryReaders is how many requests a node serves its stored flows to at once
// (hubble observe without --follow, the relay's, the stored part of a follow): each
// holds copies of up to the store's capacity (~1.9 MB for 4,095 flows) until its
// client has read them, so a client opening reads it never reads could otherwise
// grow the agent's memory without bound. One more is refused with
// ErrTooManyReaders.
const MaxHistoryReaders = 16

// LocalHistoryReaders is how many readers of stored flows a node keeps for its
// own sockets beyond MaxHistoryReaders, as LocalFollowers does for follow
// streams: readers over the network (a client reading one response every few
// seconds keeps its place for as long as the send timeout restarts) can take
// MaxHistoryReaders at most, and root's `myelin observe` (which reads the last
// flows) must still be served during an incident.
const LocalHistoryReaders = 4

// ErrTooManyReaders is what Flows returns (wrapped) for a request of stored flows
// beyond MaxHistoryReaders.
var ErrTooManyReaders = errors.New("too many readers of stored flows")

// Store keeps a node's newest flows and hands them to readers and sinks. Safe for
// concurrent use. The zero value is not usable; use New.
type Store struct {
	// fanMu serializes adding (reserve to commit): taken before mu and held while
	// the adder fills its reserved slots and, after mu is released, while the
	// followers' filters run, so followers see flows in store order and readers,
	// Stats and new followers never wait for either.
	fanMu    sync.Mutex
	mu       sync.Mutex
	ring     []flow.Record // values, grown up to capacity; next is the oldest once full
	capacity int
	next     int
	full     bool
	// writing is how many slots from next an adder has reserved (reserve): readers
	// skip them, as they may be half written.
	writing int
	// followers is replaced, never changed in place, when one comes or goes, so Add
	// takes it under mu and runs the filters on it after mu is released.
	followers []*follower
	// localFollowers are the followers of the node's own sockets (Local): the others
	// are the network's (followerAdmitted).
	localFollowers int
	// historyReaders are the requests sending stored flows now (MaxHistoryReaders),
	// localHistoryReaders those of the node's own sockets among them.
	historyReaders, localHistoryReaders int
	sinks                               []flow.Sink
	// added counts the flows committed: the flow added n-th (from 0) is at ring
	// index n % capacity, the stored ones are added-storedLen() to added-1.
	added uint64
	// origin is what Feed's records add when they are read as flows (Record.Into).
	origin Origin
	// chunkCopied, when set (tests only), runs after a reader copied a chunk of the
	// stored flows and released s.mu, before their filters run.
	chunkCopied func()
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

// AddBatch stores copies of fs in order (each a whole Record), hands them to the
// sinks and each flow to every follower that keeps up. The caller keeps fs. The
// agent's Feed converts datapath records straight into the store's slots instead
// (reserve, commit), as compact Records.
func (s *Store) AddBatch(fs []flow.Flow) {
	whole := make([]flow.Flow, len(fs))
	copy(whole, fs)
	for len(whole) > 0 {
		dst := s.reserve(len(whole))
		for i := range dst {
			dst[i] = flow.Whole(&whole[i])
		}
		s.commit(len(dst))
		whole = whole[len(dst):]
	}
}

// reserve hands the adder the next slots of the ring to write flows into: up to n
// (at least one), contiguous, so fewer at the end of the ring. Readers don't see
// them until commit publishes the ones written: when the ring is full they held its
// oldest flows, which readers lose now rather than at commit. Every reserve is
// followed by a commit; between the two the adder holds fanMu, so other adders wait
// (a batch's conversion, ~0.1 ms) and readers don't. A record stored this way costs
// no allocation and no copy: the agent converts the datapath's records straight into
// the slots (docs/bench/2026-11-30/agent-profile: the copy was 12% of its flow work).
func (s *Store) reserve(n int) []flow.Record {
	s.fanMu.Lock()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(max(n, 1), s.capacity-s.next)
	if !s.full { // not full yet: len(s.ring) is next; grown as flows come, up to capacity
		if s.next+k > cap(s.ring) {
			grown := make([]flow.Record, s.next, min(s.capacity, max(2*cap(s.ring), s.next+k, 64)))
			copy(grown, s.ring)
			s.ring = grown
		}
		s.ring = s.ring[:s.next+k]
	}
	s.writing = k
	return s.ring[s.next : s.next+k]
}

// commit publishes the first n slots of the last reserve (the rest keep what they
// held), hands them to the sinks and each to every follower that keeps up, and
// releases the adder's turn.
func (s *Store) commit(n int) {
	defer s.fanMu.Unlock()
	s.mu.Lock()
	start := s.next
	if !s.full {
		s.ring = s.ring[:s.next+n]
	}
	s.next += n
	if s.next == s.capacity {
		s.next, s.full = 0, true
	}
	s.writing = 0
	s.added += uint64(n)
	rs := s.ring[start : start+n]
	for _, sink := range s.sinks {
		sink.Observe(rs)
	}
	followers, o := s.followers, s.origin
	s.mu.Unlock()
	if len(followers) == 0 {
		return
	}
	// The slots stay as they are while fanMu is held: only adders write them. Each
	// record is made a Flow once for all the followers (only while there are
	// some), its addresses parsed once for their IP filters, and only when one has
	// some.
	needAddrs := slices.ContainsFunc(followers, func(fo *follower) bool { return fo.match.NeedsAddrs() })
	var f flow.Flow
	for i := range rs {
		rs[i].Into(&f, o.Node, o.HostRouting)
		var addrs flow.Addrs
		if needAddrs {
			addrs = flow.AddrsOf(&f)
		}
		var shared *flow.Flow
		for _, fo := range followers {
			if !fo.match.MatchAddrs(&f, addrs) {
				continue
			}
			if shared == nil {
				c := f
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
	st := Stats{Capacity: s.capacity, Stored: s.storedLen(), Added: s.added, Followers: len(s.followers)}
	return st
}

// storedLen is how many flows readers see (under s.mu): the ring without the slots
// an adder is writing.
func (s *Store) storedLen() int { return len(s.ring) - s.writing }

// stored returns the i-th newest stored flow (0: the newest), i < s.storedLen().
func (s *Store) stored(i int) *flow.Record {
	j := s.next - 1 - i
	if j < 0 {
		j += len(s.ring)
	}
	return &s.ring[j]
}

// Flows implements flow.Source: the newest req.Last stored flows that match req
// (all matching ones when not following and Last is 0), then with req.Follow every
// new matching flow until ctx ends. It returns nil when it has sent what was asked,
// ctx's error when ctx ended first (nil for a follow stream, which ends only so). A
// request beyond flow's filter limits (Request.Validate) is refused, wrapping
// flow.ErrInvalidFilter; a follow request beyond MaxFollowers, wrapping
// ErrTooManyFollowers.
func (s *Store) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("read flows: %w", err)
	}
	s.mu.Lock()
	end := s.added                         // the stored part ends here; a follower gets what comes after
	history := !req.Follow || req.Last > 0 // a follow without --last reads no stored flows
	local := isLocal(ctx)
	if history && !s.readerAdmitted(local) {
		s.mu.Unlock()
		if local {
			return fmt.Errorf("read stored flows: %w: this node serves at most %d at once, %d to its own sockets; try again",
				ErrTooManyReaders, MaxHistoryReaders+LocalHistoryReaders, LocalHistoryReaders)
		}
		return fmt.Errorf("read stored flows: %w: this node serves at most %d at once over the network; try again, or ask the relay",
			ErrTooManyReaders, MaxHistoryReaders)
	}
	var fo *follower
	if req.Follow { // registered under the same lock: no flow falls between the two parts
		if !s.followerAdmitted(local) {
			s.mu.Unlock()
			if local {
				return fmt.Errorf("follow flows: %w: this node serves at most %d at once, %d to its own sockets; stop another `myelin observe --follow` or service map page",
					ErrTooManyFollowers, MaxFollowers+LocalFollowers, LocalFollowers)
			}
			return fmt.Errorf("follow flows: %w: this node serves at most %d at once over the network; stop another `hubble observe --follow` or service map page",
				ErrTooManyFollowers, MaxFollowers)
		}
		fo = &follower{match: req.Matcher(), ch: make(chan *flow.Flow, followBuffer), lostReport: lostReport, local: local}
		s.followers = append(slices.Clip(s.followers), fo)
		if local {
			s.localFollowers++
		}
	}
	if history {
		s.historyReaders++
		if local {
			s.localHistoryReaders++
		}
	}
	s.mu.Unlock()
	if fo != nil {
		defer s.unfollow(fo)
	}
	if history {
		err := s.sendStored(ctx, req, end, local, out)
		if err != nil || fo == nil {
			return err
		}
	}
	if fo == nil {
		return nil
	}
	return fo.run(ctx, out)
}

// sendStored sends the stored flows req asks for, holding the reader's slot
// Flows took (a local one if local) until they are sent or ctx ends.
func (s *Store) sendStored(ctx context.Context, req flow.Request, end uint64, local bool, out chan<- *flow.Flow) error {
	defer func() {
		s.mu.Lock()
		s.historyReaders--
		if local {
			s.localHistoryReaders--
		}
		s.mu.Unlock()
	}()
	for _, f := range s.lastMatching(req, end) {
		select {
		case out <- f:
		case <-ctx.Done():
			return s.endErr(ctx, req)
		}
	}
	return nil
}

func (s *Store) endErr(ctx context.Context, req flow.Request) error {
	if req.Follow {
		return nil
	}
	return ctx.Err()
}

// readerAdmitted says whether one more reader of stored flows fits (s.mu held):
// admits with MaxHistoryReaders and LocalHistoryReaders.
func (s *Store) readerAdmitted(local bool) bool {
	return admits(s.historyReaders, s.localHistoryReaders, MaxHistoryReaders, LocalHistoryReaders, local)
}

// followerAdmitted says whether one more follower fits (s.mu held): admits with
// MaxFollowers and LocalFollowers.
func (s *Store) followerAdmitted(local bool) bool {
	return admits(len(s.followers), s.localFollowers, MaxFollowers, LocalFollowers, local)
}

// admits says whether one more request fits beside held ones, locals of them the
// node's own sockets': any one in a free slot of network+reserve, a network one
// also within network, so the network's requests always leave reserve slots to
// local ones.
func admits(held, locals, network, reserve int, local bool) bool {
	return held < network+reserve && (local || held-locals < network)
}

func (s *Store) unfollow(fo *follower) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followers = slices.DeleteFunc(slices.Clone(s.followers), func(f *follower) bool { return f == fo })
	if fo.local {
		s.localFollowers--
	}
}

// lastMatching returns copies of the stored flows added before end that req asks
// for, oldest first. It copies them out of the ring historyChunk at a time, newest
// first, and matches the copies without the lock; flows that leave the ring while it
// matches (the ring is full and adders go on) are not returned. Last 0 is every
// matching one (Flows calls it only for requests that read stored flows).
func (s *Store) lastMatching(req flow.Request, end uint64) []*flow.Flow {
	limit, m := req.Last, req.Matcher()
	var matched []flow.Flow // newest first
	var f flow.Flow
	chunk := make([]flow.Record, 0, historyChunk)
	for hi := end; limit == 0 || len(matched) < limit; {
		var o Origin
		chunk, o = s.copyStored(chunk[:0], hi)
		if len(chunk) == 0 {
			break
		}
		hi -= uint64(len(chunk))
		if s.chunkCopied != nil {
			s.chunkCopied()
		}
		for i := range chunk {
			chunk[i].Into(&f, o.Node, o.HostRouting)
			if f.Type != flow.TypeLost && m.Match(&f) {
				matched = append(matched, f)
				if len(matched) == limit {
					break
				}
			}
		}
	}
	out := make([]*flow.Flow, len(matched))
	for i := range matched {
		out[len(matched)-1-i] = &matched[i]
	}
	return out
}

// copyStored appends to dst copies of the stored flows added before hi, newest
// first, up to cap(dst): none when they have all left the ring. It returns the
// store's Origin with them.
func (s *Store) copyStored(dst []flow.Record, hi uint64) ([]flow.Record, Origin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := s.added - uint64(s.storedLen())
	for n := hi; n > oldest && len(dst) < cap(dst); n-- {
		dst = append(dst, *s.stored(int(s.added - n))) // the flow added (n-1)-th
	}
	return dst, s.origin
}
