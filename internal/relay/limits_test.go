package relay

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/testenv"
)

// stalledSource answers no request: each waits for its client to go away, after
// saying it started.
type stalledSource struct{ started chan struct{} }

func (s stalledSource) Flows(ctx context.Context, _ flow.Request, _ chan<- *flow.Flow) error {
	s.started <- struct{}{}
	<-ctx.Done()
	return nil
}

// The relay answers at most MaxCollectingPerSource requests without --follow from one
// client address at once (each holds what it gathered until its client reads it): one
// more is ResourceExhausted, and a slot comes back when a client goes away.
func TestRelayBoundsRequestsWithoutFollow(t *testing.T) {
	src := stalledSource{started: make(chan struct{})}
	c := startRelay(t, startNode(t, "a", src))
	open := func() (context.CancelFunc, observerpb.Observer_GetFlowsClient) {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Number: 10})
		if err != nil {
			t.Fatal(err)
		}
		return cancel, st
	}
	var cancels []context.CancelFunc
	for range MaxCollectingPerSource {
		cancel, _ := open()
		cancels = append(cancels, cancel)
		<-src.started // the relay asked the node: it holds its slot
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	_, st := open()
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("request %d without --follow: %v, want ResourceExhausted", MaxCollectingPerSource+1, err)
	}
	cancels[0]()
	for { // the slot comes back once the relay has seen the client go
		cancel, st := open()
		refused := make(chan error, 1)
		go func() { _, err := st.Recv(); refused <- err }()
		select {
		case <-src.started:
			cancels = append(cancels, cancel)
			return
		case err := <-refused:
			cancel()
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("after a client went away: %v, want admitted or ResourceExhausted", err)
			}
		}
	}
}

// One client address holds at most MaxFollowingPerSource --follow streams: each
// is a follower on every node, and a follow whose filter matches nothing is never
// ended by a send timeout. One more is ResourceExhausted, naming the bound.
func TestRelayBoundsFollowsPerClient(t *testing.T) {
	src := stalledSource{started: make(chan struct{})}
	c := startRelay(t, startNode(t, "a", src))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range MaxFollowingPerSource {
		if _, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true}); err != nil {
			t.Fatal(err)
		}
		<-src.started // the relay follows the node: the stream holds its place
	}
	st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "from one address") {
		t.Fatalf("follow %d from one client: %v, want ResourceExhausted naming the bound", MaxFollowingPerSource+1, err)
	}
}

// One client address has at most MaxStatusCallsPerSource ServerStatus and
// GetNodes calls answered at once (each asks every node): one more of either is
// ResourceExhausted, naming the bound.
func TestRelayBoundsStatusCalls(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hubble.Register(g, hubble.NewServer(hubble.Config{Node: "a", Source: stalledSource{started: make(chan struct{})},
		Stats: func() hubble.Stats { started <- struct{}{}; <-release; return hubble.Stats{} }}))
	go g.Serve(lis)
	defer g.Stop()
	defer close(release)
	c := startRelay(t, Peer{Name: "a", Address: lis.Addr().String()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range MaxStatusCallsPerSource {
		go func() { _, _ = c.ServerStatus(ctx, &observerpb.ServerStatusRequest{}) }()
		<-started // the relay asks the node: the call holds its place
	}
	if _, err := c.ServerStatus(ctx, &observerpb.ServerStatusRequest{}); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "from one address") {
		t.Errorf("ServerStatus %d from one client: %v, want ResourceExhausted naming the bound", MaxStatusCallsPerSource+1, err)
	}
	if _, err := c.GetNodes(ctx, &observerpb.GetNodesRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("GetNodes beside %d ServerStatus calls from one client: %v, want ResourceExhausted", MaxStatusCallsPerSource, err)
	}
}

// endingSource says when a request to it ended.
type endingSource struct {
	flow.Source
	ended chan struct{}
}

func (s endingSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	defer func() { s.ended <- struct{}{} }()
	return s.Source.Flows(ctx, req, out)
}

// testSendTimeout is how long the relay waits for a client that reads nothing in the
// tests of it; their clients provably never read, so only how long they run depends
// on it, never what they see.
const testSendTimeout = 50 * time.Millisecond

// manyFlows is more history than a client's flow-control window holds: a relay that
// sends it to a client that never reads is blocked in Send.
func manyFlows(node string) []*flow.Flow {
	var fs []*flow.Flow
	for i := range 5000 {
		fs = append(fs, at(node, i))
	}
	return fs
}

// dialNotReading dials addr with fixed 64 KiB flow-control windows (gRPC otherwise
// grows them up to 16 MiB as data arrives, whether or not the client reads), so a
// client that does not read takes at most that much.
func dialNotReading(t *testing.T, addr string) observerpb.ObserverClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return observerpb.NewObserverClient(conn)
}

// endsWith reads st to its end and returns the status that ended it.
func endsWith(st observerpb.Observer_GetFlowsClient) codes.Code {
	for {
		if _, err := st.Recv(); err != nil {
			return status.Code(err)
		}
	}
}

// Clients that open MaxCollectingPerSource requests without --follow and never read
// them hold their slots only for SendTimeout: each such stream is ended with
// DeadlineExceeded, and the next client is answered.
func TestRelayEndsRequestsNobodyReads(t *testing.T) {
	reqs := make(chan flow.Request)
	node := startNode(t, "a", &nodeSource{history: manyFlows("a"), reqs: reqs})
	r := New(Config{Discover: Static([]Peer{node}), Version: "test", Window: testWindow, Timeout: testPeerTimeout,
		SendTimeout: testSendTimeout})
	addr := serveRelay(t, r)
	stalled := dialNotReading(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []observerpb.Observer_GetFlowsClient
	for range MaxCollectingPerSource {
		st, err := stalled.GetFlows(ctx, &observerpb.GetFlowsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
		<-reqs // admitted: the relay asked the node
	}
	testenv.WaitFor(t, "the relay to end the streams nobody reads", func() bool { return r.collecting.Open() == 0 })
	for i, st := range streams {
		if code := endsWith(st); code != codes.DeadlineExceeded {
			t.Errorf("stream %d, never read: ended with %v, want DeadlineExceeded", i, code)
		}
	}
	go func() { <-reqs }()
	st, err := dialRelay(t, addr).GetFlows(ctx, &observerpb.GetFlowsRequest{Number: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := recvAll(t, st); len(got) != 3 {
		t.Errorf("a reading client after the stalled ones: %d responses %v, want 3", len(got), got)
	}
}

// A follow through the relay whose client never reads is ended with
// DeadlineExceeded, which ends its follow on every node (a node's follower slot).
func TestRelayEndsFollowNobodyReads(t *testing.T) {
	src := endingSource{Source: &nodeSource{history: manyFlows("a"), live: make(chan *flow.Flow)}, ended: make(chan struct{})}
	node := startNode(t, "a", src)
	addr := serveRelay(t, New(Config{Discover: Static([]Peer{node}), Version: "test", Window: testWindow,
		Timeout: testPeerTimeout, SendTimeout: testSendTimeout}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := dialNotReading(t, addr).GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true, Number: 5000})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.ended:
	case <-time.After(time.Minute):
		t.Fatal("the node's follow for a client that never reads was not ended in a minute")
	}
	// Read only now: the status waits behind what the relay had sent.
	if code := endsWith(st); code != codes.DeadlineExceeded {
		t.Errorf("follow never read: ended with %v, want DeadlineExceeded", code)
	}
}
