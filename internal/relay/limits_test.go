package relay

import (
	"context"
	"testing"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
)

// stalledSource answers no request: each waits for its client to go away, after
// saying it started.
type stalledSource struct{ started chan struct{} }

func (s stalledSource) Flows(ctx context.Context, _ flow.Request, _ chan<- *flow.Flow) error {
	s.started <- struct{}{}
	<-ctx.Done()
	return nil
}

// The relay answers at most MaxCollecting requests without --follow at once (each
// holds what it gathered until its client reads it): one more is ResourceExhausted,
// and a slot comes back when a client goes away.
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
	for range MaxCollecting {
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
		t.Fatalf("request %d without --follow: %v, want ResourceExhausted", MaxCollecting+1, err)
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
