package flowstore

import (
	"context"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// lostReport is how often a follower that lost flows reports them even when no new
// flow follows.
const lostReport = time.Second

// follower is one live reader. The store offers it each new flow without blocking:
// when its buffer is full the flow is counted as lost, and the reader gets a
// TypeLost record with the count before its next flow, or within its lostReport.
type follower struct {
	match *flow.Matcher // its request's
	ch    chan *flow.Flow
	// lostReport is the constant lostReport but in tests, which shorten their own
	// follower's (a package variable changed by one test raced with the followers
	// of the others still running).
	lostReport time.Duration
	local      bool // a request of the node's own sockets (Local)

	mu       sync.Mutex
	lost     uint64
	lostNode string
}

// offer queues f, which the follower's request matches, if it has room; called by
// Add in flow order, outside the store's lock.
func (fo *follower) offer(f *flow.Flow) {
	select {
	case fo.ch <- f:
	default:
		fo.mu.Lock()
		fo.lost++
		fo.lostNode = f.Node
		fo.mu.Unlock()
	}
}

// takeLost returns a TypeLost record for the flows lost since the last call, and
// clears the count (nil when none were lost).
func (fo *follower) takeLost() *flow.Flow {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	if fo.lost == 0 {
		return nil
	}
	f := &flow.Flow{Time: time.Now(), Type: flow.TypeLost, Lost: fo.lost, Node: fo.lostNode}
	fo.lost = 0
	return f
}

// run sends queued flows to out until ctx ends, each preceded by a TypeLost record
// when flows were lost since the last one it sent; lost flows are also reported
// every fo.lostReport when no flow comes.
func (fo *follower) run(ctx context.Context, out chan<- *flow.Flow) error {
	tick := time.NewTicker(fo.lostReport)
	defer tick.Stop()
	for {
		var f *flow.Flow
		select {
		case f = <-fo.ch:
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
		if lost := fo.takeLost(); lost != nil && !send(ctx, out, lost) {
			return nil
		}
		if f != nil && !send(ctx, out, f) {
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
