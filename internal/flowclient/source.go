package flowclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/flow"
)

// everyStored asks an agent for all it keeps (more than any store's capacity).
const everyStored = 1 << 21

// AgentsSource is a flow.Source over several agents' /v1/flows: the stored part of
// every agent merged by time (the newest Last overall), then with Follow each
// agent's new flows as they come. An agent that can't be reached is reported to
// OnError and never holds up the others; Flows fails only when every agent fails.
type AgentsSource struct {
	sockets []string
	// OnError, if set, hears about each agent that failed (socket and error).
	OnError func(socket string, err error)
}

// NewAgentsSource returns a source over the agents listening on sockets.
func NewAgentsSource(sockets []string) *AgentsSource {
	return &AgentsSource{sockets: sockets}
}

// Flows implements flow.Source.
//
// A flow reaches an agent's store up to a ring poll (100 ms, more on a loaded node)
// after the time it carries, so the live part can't simply start at the time the
// stored part ended: a flow made just before would be in neither. Each agent's live
// part starts at the oldest flow that agent returned for the stored part (or the
// request's Since when it returned all it had), and what the stored part already
// sent is skipped.
func (s *AgentsSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	if len(s.sockets) == 0 {
		return errors.New("read flows: no agent sockets")
	}
	send := func(f *flow.Flow) error {
		select {
		case out <- f:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !req.Follow {
		stored, err := s.stored(ctx, req)
		if err != nil {
			return err
		}
		return sendAll(stored.merged(req.Last), send)
	}
	t0 := time.Now()
	lives, sent, err := s.sendStoredPart(ctx, req, t0, send)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	return s.each(ctx, func(i int) flow.Request { return lives[i] }, func(f *flow.Flow) error {
		if sent != nil && !f.Time.After(t0) {
			mu.Lock()
			dup := sent[keyOf(f)]
			mu.Unlock()
			if dup {
				return nil
			}
		}
		return send(f)
	})
}

// sendStoredPart sends the stored part of a followed request, the Last flows up to
// t0, and returns each agent's live request and the keys of the flows it sent (nil
// when the request asked for none stored).
func (s *AgentsSource) sendStoredPart(ctx context.Context, req flow.Request, t0 time.Time, send func(*flow.Flow) error) ([]flow.Request, map[flowKey]bool, error) {
	lives := make([]flow.Request, len(s.sockets))
	var sent map[flowKey]bool
	if req.Last > 0 {
		part := req
		part.Follow = false
		if part.Until.IsZero() || part.Until.After(t0) {
			part.Until = t0
		}
		stored, err := s.stored(ctx, part)
		if err != nil {
			return nil, nil, err
		}
		if err := sendAll(stored.merged(req.Last), send); err != nil {
			return nil, nil, err
		}
		sent = stored.keys()
		for i := range lives {
			lives[i] = stored.liveFrom(i, req)
		}
	} else {
		for i := range lives {
			lives[i] = req
			lives[i].Since = later(req.Since, t0) // from now: nothing stored was asked for
		}
	}
	for i := range lives {
		lives[i].Last = everyStored
	}
	return lives, sent, nil
}

func sendAll(flows []*flow.Flow, send func(*flow.Flow) error) error {
	for _, f := range flows {
		if err := send(f); err != nil {
			return err
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// storedParts are the agents' answers to the stored part, one per socket.
type storedParts [][]*flow.Flow

// stored reads every agent's stored flows req asks for (req.Last each).
func (s *AgentsSource) stored(ctx context.Context, req flow.Request) (storedParts, error) {
	var mu sync.Mutex
	parts := make(storedParts, len(s.sockets))
	err := s.eachIndexed(ctx, func(int) flow.Request { return req }, func(i int, f *flow.Flow) error {
		mu.Lock()
		defer mu.Unlock()
		parts[i] = append(parts[i], f)
		return nil
	})
	return parts, err
}

// merged is every part merged by time, the newest last (all when 0).
func (p storedParts) merged(last int) []*flow.Flow {
	var all []*flow.Flow
	for _, part := range p {
		all = append(all, part...)
	}
	slices.SortStableFunc(all, func(a, b *flow.Flow) int { return a.Time.Compare(b.Time) })
	if last > 0 && len(all) > last {
		all = all[len(all)-last:]
	}
	return all
}

// keys are the flows the agents answered, sent or cut by merged: none is sent again.
func (p storedParts) keys() map[flowKey]bool {
	keys := map[flowKey]bool{}
	for _, part := range p {
		for _, f := range part {
			keys[keyOf(f)] = true
		}
	}
	return keys
}

// liveFrom is agent i's live request: from the oldest flow it returned when it may
// have more (it returned req.Last), else from req.Since (it returned all it had).
func (p storedParts) liveFrom(i int, req flow.Request) flow.Request {
	live := req
	if part := p[i]; len(part) >= req.Last {
		oldest := part[0].Time
		for _, f := range part {
			if f.Time.Before(oldest) {
				oldest = f.Time
			}
		}
		live.Since = later(req.Since, oldest)
	}
	return live
}

// flowKey tells one agent's record from another's: the same node, time to the
// nanosecond, kind and addresses are the same record sent twice.
type flowKey struct {
	node             string
	time             int64
	typ              flow.Type
	verdict          flow.Verdict
	src, dst         string
	srcPort, dstPort uint16
	reply            bool
}

func keyOf(f *flow.Flow) flowKey {
	return flowKey{node: f.Node, time: f.Time.UnixNano(), typ: f.Type, verdict: f.Verdict,
		src: f.Source.IP, dst: f.Destination.IP, srcPort: f.SrcPort, dstPort: f.DstPort, reply: f.IsReply}
}

// each runs reqOf(i) against every agent i at once, calling fn (from several
// goroutines) for each flow; it returns when all have ended, an error only if all
// failed.
func (s *AgentsSource) each(ctx context.Context, reqOf func(i int) flow.Request, fn func(*flow.Flow) error) error {
	return s.eachIndexed(ctx, reqOf, func(_ int, f *flow.Flow) error { return fn(f) })
}

// eachIndexed is each with the agent's index passed to fn.
func (s *AgentsSource) eachIndexed(ctx context.Context, reqOf func(i int) flow.Request, fn func(int, *flow.Flow) error) error {
	errs := make([]error, len(s.sockets))
	var wg sync.WaitGroup
	for i, sock := range s.sockets {
		q, err := Query(reqOf(i))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = api.NewClient(sock).Flows(ctx, q, func(f *flow.Flow) error { return fn(i, f) })
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	failed := 0
	for i, e := range errs {
		if e == nil {
			continue
		}
		failed++
		errs[i] = fmt.Errorf("%s: %w", s.sockets[i], e)
		if s.OnError != nil {
			s.OnError(s.sockets[i], e)
		}
	}
	if failed == len(s.sockets) || (failed > 0 && s.OnError == nil) {
		return fmt.Errorf("read flows: %w", errors.Join(errs...))
	}
	return nil
}
