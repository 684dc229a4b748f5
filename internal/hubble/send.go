package hubble

import (
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultSendTimeout is how long a GetFlows stream (a node's or the relay's) waits for
// its client to take one response before it ends the stream with DeadlineExceeded. A
// client that opens streams and never reads them would otherwise hold what each
// stream holds (a node's follower and stored-flow reader slots, the relay's slots for
// requests without --follow) for good. A slow client that reads is not cut: each
// response it takes restarts the wait.
const DefaultSendTimeout = 30 * time.Second

// TimedSender sends a stream's responses from one goroutine and gives up on one its
// client has not taken within a timeout. gRPC's Send blocks while the client's
// flow-control window is full and has no deadline of its own; a handler that returns
// ends the stream, which makes a blocked Send fail, so a caller that gets the timeout
// error must return from its handler. Send is not safe for concurrent use (no more
// than a stream's Send is).
type TimedSender struct {
	send    func(*observerpb.GetFlowsResponse) error
	timeout time.Duration
	timer   *time.Timer
	next    chan *observerpb.GetFlowsResponse
	result  chan error
	stop    chan struct{}
	err     error // why an earlier Send failed; every later one returns it
}

// NewTimedSender starts the goroutine that calls send; Close stops it.
func NewTimedSender(timeout time.Duration, send func(*observerpb.GetFlowsResponse) error) *TimedSender {
	s := &TimedSender{send: send, timeout: timeout, timer: time.NewTimer(timeout),
		next: make(chan *observerpb.GetFlowsResponse), result: make(chan error, 1), stop: make(chan struct{})}
	s.timer.Stop()
	go s.run()
	return s
}

func (s *TimedSender) run() {
	for {
		select {
		case r := <-s.next:
			s.result <- s.send(r) // buffered: a Send that gave up does not wait for it
		case <-s.stop:
			return
		}
	}
}

// Send hands r to the stream and waits until the client took it (gRPC accepted it
// within the client's flow-control window), at most the timeout. Past the timeout it
// returns a DeadlineExceeded status, as it does on every later call.
func (s *TimedSender) Send(r *observerpb.GetFlowsResponse) error {
	if s.err != nil {
		return s.err
	}
	s.next <- r // the goroutine is idle: the previous send returned its result
	s.timer.Reset(s.timeout)
	select {
	case err := <-s.result:
		s.timer.Stop()
		s.err = err
	case <-s.timer.C:
		s.err = status.Errorf(codes.DeadlineExceeded,
			"the client read nothing for %v: the stream is ended so that it holds no slot of the server's", s.timeout)
	}
	return s.err
}

// Close stops the sending goroutine: at once when it is idle, else once its pending
// send fails (when the handler has returned and the stream ended).
func (s *TimedSender) Close() {
	close(s.stop)
}
