package endpoint

import (
	"context"
	"sync"
	"time"
)

// A deleted pod's host veth is retired, not deleted, while CNI DEL waits: it is set
// down (the pod's address is unreachable through it, and its peer in the pod loses
// carrier) and handed to the Reaper, which deletes the pair after DEL has answered.
// Deleting a veth waits for RCU in the kernel (netdev_run_todo's rcu_barrier, 10-20 ms
// on a 2-vCPU VM), which is most of what DEL used to cost (docs/scale.md).
//
// A delete that fails is tried again after retryDelay (1 s, doubling up to 2 min)
// for as long as the veth is there: a retired veth is never given up, so none leaks
// while the agent runs. A veth that is gone already counts as deleted.
//
// Nothing is lost if the agent stops first: a retired veth is down and no one owns
// it, and the next agent retires every such veth again at start (Restore). An ADD of the same container id, whose veth name is the retired one's,
// deletes the retired veth first (Allocate).
//
// The Reaper deletes only veths nobody owns: before each attempt it asks the
// manager (owned) whether an endpoint is on the veth or an ADD between allocate and
// register owns its name (ownsVeth), and leaves such a veth to its owner.

// The retry delays after a failed delete: retryFirst after the first failure,
// doubling with each failure in a row, never more than retryMax.
const (
	retryFirst = time.Second
	retryMax   = 2 * time.Minute
)

// retryDelay is how long the Reaper waits after the failures-th failed delete of a
// veth in a row (failures >= 1).
func retryDelay(failures int) time.Duration {
	d := retryFirst
	for i := 1; i < failures && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// retired is a host veth waiting to be deleted.
type retired struct {
	index    int
	failures int           // failed deletes in a row
	due      time.Time     // no background attempt before this (zero: at once)
	attempt  chan struct{} // set while someone tries to delete it; closed when that try ends
}

// Outcome is what one attempt did with a retired veth.
type Outcome int

const (
	// Deleted: the veth is deleted, or was gone already.
	Deleted Outcome = iota
	// Kept: an endpoint or an ADD in progress owns the veth; it is left to its owner.
	Kept
	// Failed: the delete failed; the veth stays queued and is tried again.
	Failed
)

// Attempt is one try at a retired veth, as the Reaper reports it.
type Attempt struct {
	Name    string
	Index   int
	Outcome Outcome
	Err     error // why it Failed
	// Failures counts the failed deletes in a row, this one included, and RetryIn
	// is when the veth is tried again (both only with Failed).
	Failures int
	RetryIn  time.Duration
}

// Reaper deletes retired host veths in the background.
type Reaper struct {
	links Links
	owned func(name string, index int) bool // whether someone owns the veth now (Manager.ownsVeth)
	now   func() time.Time
	mu    sync.Mutex
	queue map[string]*retired // by name
	wake  chan struct{}
}

func newReaper(links Links, owned func(name string, index int) bool) *Reaper {
	return &Reaper{links: links, owned: owned, now: time.Now, queue: map[string]*retired{}, wake: make(chan struct{}, 1)}
}

// add queues the veth name at index for deletion; a name queued already keeps its
// entry (the same veth, retired twice by a repeated DEL).
func (r *Reaper) add(name string, index int) {
	r.mu.Lock()
	if _, ok := r.queue[name]; !ok {
		r.queue[name] = &retired{index: index}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Pending returns the names of the veths waiting to be deleted.
func (r *Reaper) Pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.queue))
	for name := range r.queue {
		out = append(out, name)
	}
	return out
}

// Len is how many veths wait to be deleted (retries included).
func (r *Reaper) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// finish deletes the retired veth name now, whatever its retry delay, or waits while
// the background tries it (and tries again itself if that failed); a name not queued
// is nothing to do. A failed delete stays queued for the background's retries.
func (r *Reaper) finish(name string) error {
	for {
		r.mu.Lock()
		v, ok := r.queue[name]
		if !ok {
			r.mu.Unlock()
			return nil
		}
		if busy := v.attempt; busy != nil {
			r.mu.Unlock()
			<-busy
			continue
		}
		v.attempt = make(chan struct{})
		r.mu.Unlock()
		return r.try(name, v).Err
	}
}

// claimDue claims one veth whose retry is due at now. With none due it returns the
// earliest time one will be (zero: nothing waits for a retry).
func (r *Reaper) claimDue(now time.Time) (string, *retired, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	for name, v := range r.queue {
		switch {
		case v.attempt != nil: // someone is at it
		case !v.due.After(now):
			v.attempt = make(chan struct{})
			return name, v, time.Time{}
		case next.IsZero() || v.due.Before(next):
			next = v.due
		}
	}
	return "", nil, next
}

// try deletes a claimed veth, unless someone owns it now, and only if the link at its
// index still has its name (a veth created since under the same name is another
// attachment's). A veth deleted, gone or owned leaves the queue; a failed delete
// stays, due again after retryDelay. No owner appears between the check and the
// delete: only Allocate gives a container id an IP, and it first waits for an attempt
// in progress on that id's veth name (finish).
func (r *Reaper) try(name string, v *retired) Attempt {
	a := Attempt{Name: name, Index: v.index, Outcome: Deleted}
	if r.owned(name, v.index) {
		a.Outcome = Kept
	} else if err := r.links.DeleteLinkAt(v.index, name); err != nil {
		a.Outcome, a.Err = Failed, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Outcome == Failed {
		v.failures++
		a.Failures, a.RetryIn = v.failures, retryDelay(v.failures)
		v.due = r.now().Add(a.RetryIn)
	} else {
		delete(r.queue, name)
	}
	close(v.attempt)
	v.attempt = nil
	return a
}

// Run deletes queued veths one at a time until ctx ends, retrying failed deletes
// when they are due, and calls report with each attempt.
func (r *Reaper) Run(ctx context.Context, report func(Attempt)) {
	for {
		next := r.reapDue(report)
		if !r.sleep(ctx, next) {
			return
		}
	}
}

// reapDue tries every queued veth that is due and returns when the next retry is
// (zero: none).
func (r *Reaper) reapDue(report func(Attempt)) time.Time {
	for {
		name, v, next := r.claimDue(r.now())
		if v == nil {
			return next
		}
		report(r.try(name, v))
	}
}

// sleep waits for a veth queued, the retry due at next (zero: none) or ctx's end;
// it reports whether to go on.
func (r *Reaper) sleep(ctx context.Context, next time.Time) bool {
	var retry <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(next.Sub(r.now()))
		defer t.Stop()
		retry = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
	case <-retry:
	}
	return true
}
