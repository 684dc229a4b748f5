package flowstore

import (
	"context"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// follower is one live reader. The store offers it each new flow without blocking:
// when its buffer is full the flow is counted as lost, and the reader gets a
// TypeLost record with the count before its next flow.
type follower struct {
	req flow.Request
	ch  chan *flow.Flow

	mu   sync.Mutex
	lost uint64
}

// offer queues f if the follower wants it and has room; called under the store's lock.
func (fo *follower) offer(f *flow.Flow) {
	if !fo.req.Match(f) {
		return
	}
	select {
	case fo.ch <- f:
	default:
		fo.mu.Lock()
		fo.lost++
		fo.mu.Unlock()
	}
}

// takeLost returns and clears the lost count.
func (fo *follower) takeLost() uint64 {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	n := fo.lost
	fo.lost = 0
	return n
}

// run sends queued flows to out until ctx ends, each preceded by a TypeLost record
// when flows were lost since the last one it sent.
func (fo *follower) run(ctx context.Context, out chan<- *flow.Flow) error {
	for {
		var f *flow.Flow
		select {
		case f = <-fo.ch:
		case <-ctx.Done():
			return nil
		}
		if n := fo.takeLost(); n > 0 {
			lost := &flow.Flow{Time: time.Now(), Type: flow.TypeLost, Lost: n, Node: f.Node}
			if !send(ctx, out, lost) {
				return nil
			}
		}
		if !send(ctx, out, f) {
			return nil
		}
	}
}

func send(ctx context.Context, out chan<- *flow.Flow, f *flow.Flow) bool {
	select {
	case out <- f:
		return true
	case <-ctx.Done():
		return false
	}
}
