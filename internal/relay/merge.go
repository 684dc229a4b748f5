package relay

import (
	"container/heap"
	"sort"
	"sync"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
)

// respTime is when a response's event happened.
func respTime(r *observerpb.GetFlowsResponse) time.Time {
	if t := r.GetTime(); t != nil {
		return t.AsTime()
	}
	return r.GetFlow().GetTime().AsTime()
}

// sortLast orders a finished batch by time and, when last > 0, keeps only the newest
// last flows (lost events and node status events stay).
func sortLast(batch []*observerpb.GetFlowsResponse, last uint64) []*observerpb.GetFlowsResponse {
	sort.SliceStable(batch, func(i, j int) bool { return respTime(batch[i]).Before(respTime(batch[j])) })
	if last == 0 {
		return batch
	}
	var flows uint64
	for _, r := range batch {
		if r.GetFlow() != nil {
			flows++
		}
	}
	out := batch[:0]
	for _, r := range batch {
		if r.GetFlow() != nil && flows > last {
			flows--
			continue
		}
		out = append(out, r)
	}
	return out
}

// held is a followed response waiting in the ordering window.
type held struct {
	r       *observerpb.GetFlowsResponse
	t       time.Time // event time (heap order)
	arrived time.Time
}

type window []held

func (w window) Len() int           { return len(w) }
func (w window) Less(i, j int) bool { return w[i].t.Before(w[j].t) }
func (w window) Swap(i, j int)      { w[i], w[j] = w[j], w[i] }
func (w *window) Push(x any)        { *w = append(*w, x.(held)) }
func (w *window) Pop() any {
	old := *w
	x := old[len(old)-1]
	*w = old[:len(old)-1]
	return x
}

// due pops, oldest event first, the responses that have waited at least d (and any
// beyond max held), so flows from nodes that report a little late still sort in.
func (w *window) due(now time.Time, d time.Duration, max int) []*observerpb.GetFlowsResponse {
	var out []*observerpb.GetFlowsResponse
	for w.Len() > 0 && (w.Len() > max || now.Sub((*w)[0].arrived) >= d) {
		out = append(out, heap.Pop(w).(held).r)
	}
	return out
}

// sender hands merged responses to a client. In follow mode it never blocks the merge:
// when the client falls ClientBuffer responses behind, newer ones are dropped and the
// client gets a lost event saying how many, once it catches up.
type sender struct {
	q    chan *observerpb.GetFlowsResponse
	lost uint64
	done chan struct{} // closed when the sending goroutine ended
	err  error         // why it ended early (read after done)
	once sync.Once
}

func newSender(size int, send func(*observerpb.GetFlowsResponse) error) *sender {
	s := &sender{q: make(chan *observerpb.GetFlowsResponse, size), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for r := range s.q {
			if err := send(r); err != nil {
				s.err = err
				return
			}
		}
	}()
	return s
}

// offer queues r without blocking, counting it as lost when the queue is full.
func (s *sender) offer(r *observerpb.GetFlowsResponse) {
	if s.lost > 0 {
		le := &observerpb.GetFlowsResponse{Time: r.GetTime(), ResponseTypes: &observerpb.GetFlowsResponse_LostEvents{
			LostEvents: &flowpb.LostEvent{Source: flowpb.LostEventSource_OBSERVER_EVENTS_QUEUE, NumEventsLost: s.lost}}}
		select {
		case s.q <- le:
			s.lost = 0
		default:
			s.lost++
			return
		}
	}
	select {
	case s.q <- r:
	default:
		s.lost++
	}
}

// finish sends what is queued and waits for the sending goroutine (a client that went
// away ends its Send at once).
func (s *sender) finish() error {
	s.once.Do(func() { close(s.q) })
	<-s.done
	return s.err
}
