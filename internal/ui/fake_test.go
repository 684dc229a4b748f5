package ui

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// fakeSource serves fixed stored flows, then what the test pushes on live (with
// Follow), and records the requests it got. The page is what these tests check; the
// real Sources have their own tests.
type fakeSource struct {
	stored []*flow.Flow
	live   chan *flow.Flow
	err    error // returned after the stored flows, when set

	mu   sync.Mutex
	reqs []flow.Request
}

func newFakeSource(stored ...*flow.Flow) *fakeSource {
	return &fakeSource{stored: stored, live: make(chan *flow.Flow)}
}

func (s *fakeSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	start := 0
	if req.Last > 0 && req.Last < len(s.stored) {
		start = len(s.stored) - req.Last
	}
	for _, f := range s.stored[start:] {
		select {
		case out <- f:
		case <-ctx.Done():
			return nil
		}
	}
	if s.err != nil || !req.Follow {
		return s.err
	}
	for {
		select {
		case f := <-s.live:
			select {
			case out <- f:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// serve serves the page over src for the test. Its flow streams stay open until the
// page goes: the test's end closes their connections first.
func serve(t *testing.T, src flow.Source) *httptest.Server {
	srv := httptest.NewServer(New(src))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func (s *fakeSource) requests() []flow.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]flow.Request(nil), s.reqs...)
}

// tcp is a TCP flow from pod (or IP) a to pod (or IP) b: "ns/name" names a pod,
// anything else is an address outside pods.
func tcp(ago time.Duration, a, b string, port uint16, v flow.Verdict) *flow.Flow {
	return &flow.Flow{
		Time: time.Now().Add(-ago), Node: "myelin-node-1", Type: flow.TypeL3L4, Verdict: v,
		Source: endpoint(a), Destination: endpoint(b), Protocol: "TCP", SrcPort: 40000, DstPort: port,
		TCPFlags: &flow.TCPFlags{SYN: true},
	}
}

func endpoint(s string) flow.Endpoint {
	for i := range len(s) {
		if s[i] == '/' {
			return flow.Endpoint{IP: "10.244.0.9", Namespace: s[:i], Pod: s[i+1:]}
		}
	}
	return flow.Endpoint{IP: s}
}
