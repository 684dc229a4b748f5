package hubble

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
	"github.com/myelin-net/myelin/internal/testenv"
)

// testSendTimeout is how long servers wait for a client that reads nothing in these
// tests; their clients provably never read, so it sets only how long they run.
const testSendTimeout = 50 * time.Millisecond

// notReading are dial options with fixed 64 KiB flow-control windows (gRPC otherwise
// grows them up to 16 MiB as data arrives, whether or not the client reads): a
// client that does not read takes at most that much.
var notReading = []grpc.DialOption{grpc.WithInitialWindowSize(1 << 16), grpc.WithInitialConnWindowSize(1 << 16)}

// endsWith reads st to its end and returns the status that ended it.
func endsWith(st observerpb.Observer_GetFlowsClient) codes.Code {
	for {
		if _, err := st.Recv(); err != nil {
			return status.Code(err)
		}
	}
}

// endlessServer sends flows until Send fails, through a TimedSender, and reports
// when the stream's own Send returned and with what the handler returned.
type endlessServer struct {
	observerpb.UnimplementedObserverServer
	sendReturned chan error // the last gRPC Send's error
	returned     chan error // the handler's
}

func (s *endlessServer) GetFlows(_ *observerpb.GetFlowsRequest, stream observerpb.Observer_GetFlowsServer) error {
	var last error
	out := NewTimedSender(testSendTimeout, func(r *observerpb.GetFlowsResponse) error {
		last = stream.Send(r)
		if last != nil {
			s.sendReturned <- last
		}
		return last
	})
	defer out.Close()
	f := Response(&flow.Flow{Time: t0, Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP"})
	var err error
	for err == nil {
		err = out.Send(f)
	}
	s.returned <- err
	return err
}

// gRPC's Send blocks while a client that does not read has its window full; a
// TimedSender gives up on it after its timeout, and the handler's return makes the
// blocked Send return (no goroutine stays blocked on the stream).
func TestTimedSenderEndsABlockedSend(t *testing.T) {
	srv := &endlessServer{sendReturned: make(chan error, 1), returned: make(chan error, 1)}
	c := observerpb.NewObserverClient(dialServer(t, srv, notReading...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-srv.returned; status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("handler for a client that never reads returned %v, want DeadlineExceeded", err)
	}
	select {
	case err := <-srv.sendReturned:
		if err == nil {
			t.Error("the blocked Send succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the blocked Send did not return in a minute after the handler returned")
	}
	if code := endsWith(st); code != codes.DeadlineExceeded {
		t.Errorf("client read the stream after the server gave up: %v, want DeadlineExceeded", code)
	}
}

// Clients that take every follower slot of a node and never read lose them once
// flows come and go unread for SendTimeout: each stream is ended with
// DeadlineExceeded and the next follower is admitted.
func TestServerEndsFollowersNobodyReads(t *testing.T) {
	store := flowstore.New(4095)
	c := observerpb.NewObserverClient(dialServer(t, NewServer(Config{Source: store, SendTimeout: testSendTimeout}), notReading...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []observerpb.Observer_GetFlowsClient
	for range flowstore.MaxFollowers {
		st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	testenv.WaitFor(t, "every follower to be admitted", func() bool { return store.Stats().Followers == flowstore.MaxFollowers })
	st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if code := endsWith(st); code != codes.ResourceExhausted { // nothing was sent yet: no timeout ran
		t.Fatalf("follower %d: %v, want ResourceExhausted", flowstore.MaxFollowers+1, code)
	}
	batch := make([]flow.Flow, 1000)
	for i := range batch {
		batch[i] = flow.Flow{Time: t0.Add(time.Duration(i)), Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded,
			Protocol: "TCP", SrcPort: uint16(i)}
	}
	// Flows keep coming (more than the windows and buffers hold) until the followers,
	// blocked in Send, are ended.
	testenv.WaitFor(t, "the node to end the followers nobody reads", func() bool {
		store.AddBatch(batch)
		return store.Stats().Followers == 0
	})
	for i, st := range streams {
		if code := endsWith(st); code != codes.DeadlineExceeded {
			t.Errorf("follower %d, never read: ended with %v, want DeadlineExceeded", i, code)
		}
	}
	if _, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "a new follower", func() bool { return store.Stats().Followers == 1 })
}

// activeSource counts the requests its store got and those it is serving.
type activeSource struct {
	*flowstore.Store
	got, active atomic.Int32
}

func (s *activeSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	s.got.Add(1)
	s.active.Add(1)
	defer s.active.Add(-1)
	return s.Store.Flows(ctx, req, out)
}

// Clients that take every stored-flow reader slot of a node and never read lose them
// after SendTimeout: each stream is ended with DeadlineExceeded and the next reader
// is answered.
func TestServerEndsReadersNobodyReads(t *testing.T) {
	src := &activeSource{Store: flowstore.New(4095)}
	for i := range 4095 { // more than a client's windows and the server's buffers hold
		src.Add(&flow.Flow{Time: t0.Add(time.Duration(i)), Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded,
			Protocol: "TCP", SrcPort: uint16(i), Service: "default/" + strings.Repeat("s", 100)})
	}
	srv := NewServer(Config{Source: src, SendTimeout: testSendTimeout})
	stalled := observerpb.NewObserverClient(dialServer(t, srv, notReading...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []observerpb.Observer_GetFlowsClient
	for range flowstore.MaxHistoryReaders {
		st, err := stalled.GetFlows(ctx, &observerpb.GetFlowsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	testenv.WaitFor(t, "the node to end the readers nobody reads", func() bool {
		return src.got.Load() == flowstore.MaxHistoryReaders && src.active.Load() == 0
	})
	for i, st := range streams {
		if code := endsWith(st); code != codes.DeadlineExceeded {
			t.Errorf("reader %d, never read: ended with %v, want DeadlineExceeded", i, code)
		}
	}
	st, err := observerpb.NewObserverClient(dialServer(t, srv)).GetFlows(ctx, &observerpb.GetFlowsRequest{Number: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(st); err != nil || len(got) != 3 {
		t.Errorf("a reading client after the stalled ones: %d responses, %v; want 3", len(got), err)
	}
}
