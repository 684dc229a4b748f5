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
func (s *AgentsSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	if len(s.sockets) == 0 {
		return errors.New("read flows: no agent sockets")
	}
	t0 := time.Now()
	if !req.Follow || req.Last > 0 {
		stored := req
		stored.Follow = false
		if req.Follow && (stored.Until.IsZero() || stored.Until.After(t0)) {
			stored.Until = t0 // the live part starts here
		}
		if err := s.sendStored(ctx, stored, out); err != nil || !req.Follow {
			return err
		}
	}
	live := req
	live.Last = everyStored
	if live.Since.Before(t0) {
		live.Since = t0
	}
	return s.each(ctx, live, func(f *flow.Flow) error {
		select {
		case out <- f:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// sendStored reads every agent's stored flows, merges them by time and sends the
// newest req.Last (all when 0).
func (s *AgentsSource) sendStored(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	var mu sync.Mutex
	var all []*flow.Flow
	err := s.each(ctx, req, func(f *flow.Flow) error {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, f)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b *flow.Flow) int { return a.Time.Compare(b.Time) })
	if req.Last > 0 && len(all) > req.Last {
		all = all[len(all)-req.Last:]
	}
	for _, f := range all {
		select {
		case out <- f:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// each runs req against every agent at once, calling fn (from several goroutines)
// for each flow; it returns when all have ended, an error only if all failed.
func (s *AgentsSource) each(ctx context.Context, req flow.Request, fn func(*flow.Flow) error) error {
	q, err := Query(req)
	if err != nil {
		return err
	}
	errs := make([]error, len(s.sockets))
	var wg sync.WaitGroup
	for i, sock := range s.sockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = api.NewClient(sock).Flows(ctx, q, fn)
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
