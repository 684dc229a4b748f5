package relay

import (
	"container/heap"
	"sort"
	"sync"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/types/known/timestamppb"
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

func (s *sender) lostEvent(t *timestamppb.Timestamp) *observerpb.GetFlowsResponse {
	return &observerpb.GetFlowsResponse{Time: t, ResponseTypes: &observerpb.GetFlowsResponse_LostEvents{
		LostEvents: &flowpb.LostEvent{Source: flowpb.LostEventSource_OBSERVER_EVENTS_QUEUE, NumEventsLost: s.lost}}}
}

// flushLost queues a lost event (at time t) for the responses dropped since the last
// one, if any and if there is room; false when some stay unreported.
func (s *sender) flushLost(t *timestamppb.Timestamp) bool {
	if s.lost == 0 {
		return true
	}
	select {
	case s.q <- s.lostEvent(t):
		s.lost = 0
		return true
	default:
		return false
	}
}

// offer queues r without blocking, counting it as lost when the queue is full.
func (s *sender) offer(r *observerpb.GetFlowsResponse) {
	if !s.flushLost(r.GetTime()) {
		s.lost++
		return
	}
	select {
	case s.q <- r:
	default:
		s.lost++
	}
}

// finish reports what was lost and not yet reported, sends what is queued and waits
// for the sending goroutine (a client that went away ends its Send at once).
func (s *sender) finish() error {
	s.once.Do(func() {
		if s.lost > 0 {
			select {
			case s.q <- s.lostEvent(timestamppb.Now()):
				s.lost = 0
			case <-s.done:
			}
		}
		close(s.q)
	})
	<-s.done
	return s.err
}

// MaxLast is the most flows the relay returns for one request without --follow
// (hubble observe --last N with a larger N, or with none, gets the newest MaxLast);
// it holds at most that many while it merges the nodes' answers.
const MaxLast = 20000

// newest keeps the newest n flows of the responses added to it (and up to n other
// responses: lost events, node status), so a merge holds at most 2n.
type newest struct {
	n     int
	flows window // min-heap by event time: the oldest kept flow on top
	other []*observerpb.GetFlowsResponse
}

func newNewest(last uint64) *newest {
	n := MaxLast
	if last > 0 && last < MaxLast {
		n = int(last)
	}
	return &newest{n: n}
}

func (k *newest) add(r *observerpb.GetFlowsResponse) {
	if r.GetFlow() == nil {
		if len(k.other) < k.n {
			k.other = append(k.other, r)
		}
		return
	}
	t := respTime(r)
	if k.flows.Len() < k.n {
		heap.Push(&k.flows, held{r: r, t: t})
		return
	}
	if t.After(k.flows[0].t) {
		k.flows[0] = held{r: r, t: t}
		heap.Fix(&k.flows, 0)
	}
}

// sorted returns what was kept, oldest first.
func (k *newest) sorted() []*observerpb.GetFlowsResponse {
	out := append([]*observerpb.GetFlowsResponse(nil), k.other...)
	for _, h := range k.flows {
		out = append(out, h.r)
	}
	return sortLast(out, 0)
}
