package endpoint

import (
	"context"
	"sync"
)

// A deleted pod's host veth is retired, not deleted, while CNI DEL waits: it is set
// down (the pod's address is unreachable through it, and its peer in the pod loses
// carrier) and handed to the Reaper, which deletes the pair after DEL has answered.
// Deleting a veth waits for RCU in the kernel (netdev_run_todo's rcu_barrier, 10-20 ms
// on a 2-vCPU VM), which is most of what DEL used to cost (docs/scale.md).
//
// Nothing is lost if the agent stops first: a retired veth is down and has no
// endpoint record, and the next agent retires every such veth again at start
// (Restore). An ADD of the same container id, whose veth name is the retired one's,
// deletes the retired veth first (Allocate).

// retired is a host veth waiting to be deleted.
type retired struct {
	index   int
	claimed bool          // someone is deleting it
	done    chan struct{} // closed once it is deleted (or deleting it failed)
}

// Reaper deletes retired host veths in the background.
type Reaper struct {
	links Links
	mu    sync.Mutex
	queue map[string]*retired // by name
	wake  chan struct{}
}

func newReaper(links Links) *Reaper {
	return &Reaper{links: links, queue: map[string]*retired{}, wake: make(chan struct{}, 1)}
}

// add queues the veth name at index for deletion; a name queued already keeps its
// entry (the same veth, retired twice by a repeated DEL).
func (r *Reaper) add(name string, index int) {
	r.mu.Lock()
	if _, ok := r.queue[name]; !ok {
		r.queue[name] = &retired{index: index, done: make(chan struct{})}
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

// finish deletes the retired veth name now, or waits while the background deletes
// it; a name not queued is nothing to do.
func (r *Reaper) finish(name string) error {
	r.mu.Lock()
	v, ok := r.queue[name]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	if v.claimed {
		r.mu.Unlock()
		<-v.done
		return nil
	}
	v.claimed = true
	r.mu.Unlock()
	return r.remove(name, v)
}

// claimNext takes one unclaimed veth off the queue for deletion.
func (r *Reaper) claimNext() (string, *retired, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, v := range r.queue {
		if !v.claimed {
			v.claimed = true
			return name, v, true
		}
	}
	return "", nil, false
}

// remove deletes a claimed veth (only if the link at its index still has its name:
// a veth created since under the same name is another attachment's) and drops it
// from the queue. A failed delete is not retried here: the veth stays down with no
// endpoint, and the next agent start retires it again.
func (r *Reaper) remove(name string, v *retired) error {
	err := r.links.DeleteLinkAt(v.index, name)
	r.mu.Lock()
	delete(r.queue, name)
	r.mu.Unlock()
	close(v.done)
	return err
}

// Run deletes queued veths one at a time until ctx ends, calling report with each
// veth deleted and the error, if any.
func (r *Reaper) Run(ctx context.Context, report func(name string, err error)) {
	for {
		name, v, ok := r.claimNext()
		if ok {
			report(name, r.remove(name, v))
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}
