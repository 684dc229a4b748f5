package relay

import (
	"container/heap"
	"slices"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func resp(sec int) *observerpb.GetFlowsResponse {
	return &observerpb.GetFlowsResponse{Time: timestamppb.New(t0.Add(time.Duration(sec) * time.Second)),
		ResponseTypes: &observerpb.GetFlowsResponse_Flow{}}
}

// A client that does not read makes the relay drop, count, and later report flows;
// the merge never waits for it.
func TestSenderSlowClientLosesFlowsBounded(t *testing.T) {
	release := make(chan struct{})
	taken := make(chan struct{}, 1)
	var got []*observerpb.GetFlowsResponse
	s := newSender(2, func(r *observerpb.GetFlowsResponse) error {
		select {
		case taken <- struct{}{}:
		default:
		}
		<-release
		got = append(got, r)
		return nil
	})
	// The sender holds the first response until release; had it taken one
	// only while the others were offered, a lost event would have gone into
	// the queue in between and the count would depend on when.
	s.offer(resp(0))
	<-taken
	for i := 1; i < 10; i++ { // returns at once although nothing is being sent
		s.offer(resp(i))
	}
	if len(s.q) != 2 || s.lost != 7 {
		t.Fatalf("queue %d, lost %d: want the queue bounded at 2 and the other 7 counted lost", len(s.q), s.lost)
	}
	lost := s.lost
	close(release)
	for len(s.q) > 0 {
		time.Sleep(time.Millisecond)
	}
	s.offer(resp(10))
	if err := s.finish(); err != nil {
		t.Fatal(err)
	}
	n := len(got)
	if n < 2 || got[n-2].GetLostEvents().GetNumEventsLost() != lost || got[n-1].GetTime().AsTime() != t0.Add(10*time.Second) {
		t.Errorf("sent %v: want a lost event of %d before the next flow", got, lost)
	}
}

func TestWindowDue(t *testing.T) {
	var w window
	now := time.Now()
	for _, h := range []held{{r: resp(3), t: t0.Add(3 * time.Second), arrived: now.Add(-time.Second)},
		{r: resp(1), t: t0.Add(time.Second), arrived: now},
		{r: resp(2), t: t0.Add(2 * time.Second), arrived: now.Add(-time.Second)}} {
		w.Push(h)
	}
	// heap order: the newest arrival (1s) holds back the others until it is due.
	heap.Init(&w)
	if d := w.due(now, 500*time.Millisecond, 10); len(d) != 0 {
		t.Errorf("due with the oldest event just arrived = %d responses, want 0", len(d))
	}
	d := w.due(now.Add(time.Second), 500*time.Millisecond, 10)
	if len(d) != 3 {
		t.Errorf("due after the window = %d", len(d))
	}
	for i := 1; i < len(d); i++ {
		if respTime(d[i]).Before(respTime(d[i-1])) {
			t.Errorf("due out of order at %d", i)
		}
	}
}

// Responses dropped for a slow client are reported when the stream ends, although no
// response follows them.
func TestSenderFinishReportsLost(t *testing.T) {
	release := make(chan struct{})
	var got []*observerpb.GetFlowsResponse
	s := newSender(2, func(r *observerpb.GetFlowsResponse) error {
		<-release
		got = append(got, r)
		return nil
	})
	for i := range 10 {
		s.offer(resp(i))
	}
	lost := s.lost
	close(release)
	if err := s.finish(); err != nil {
		t.Fatal(err)
	}
	if n := len(got); lost == 0 || n == 0 || got[n-1].GetLostEvents().GetNumEventsLost() != lost {
		t.Errorf("sent %v: want a final lost event of %d", got, lost)
	}
}

// A merge without --follow holds only the newest n flows however many arrive.
func TestNewestKeepsNewestN(t *testing.T) {
	k := newNewest(3)
	for _, sec := range []int{5, 1, 9, 7, 3, 8, 2, 6} {
		k.add(&observerpb.GetFlowsResponse{Time: timestamppb.New(t0.Add(time.Duration(sec) * time.Second)),
			ResponseTypes: &observerpb.GetFlowsResponse_Flow{Flow: &flowpb.Flow{}}})
		if k.flows.Len() > 3 {
			t.Fatalf("holding %d flows, want at most 3", k.flows.Len())
		}
	}
	k.add(nodeStatus(relaypb.NodeState_NODE_UNAVAILABLE, []string{"n2"}, "down"))
	var secs []int
	for _, r := range k.sorted() {
		if r.GetFlow() != nil {
			secs = append(secs, int(respTime(r).Sub(t0)/time.Second))
		}
	}
	if !slices.Equal(secs, []int{7, 8, 9}) || len(k.sorted()) != 4 {
		t.Errorf("kept flows at %v (%d responses), want 7 8 9 and the node status", secs, len(k.sorted()))
	}
	if n := newNewest(0).n; n != MaxLast {
		t.Errorf("newNewest(0).n = %d, want MaxLast %d", n, MaxLast)
	}
	if n := newNewest(MaxLast * 10).n; n != MaxLast {
		t.Errorf("newNewest(10*MaxLast).n = %d, want MaxLast %d", n, MaxLast)
	}
}
