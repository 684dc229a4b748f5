package ui

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/testenv"
)

// endlessSource sends flows until its request ends, then says so on returned.
type endlessSource struct{ returned chan struct{} }

func (s endlessSource) Flows(ctx context.Context, _ flow.Request, out chan<- *flow.Flow) error {
	defer close(s.returned)
	for i := 0; ; i++ {
		f := tcp(0, "shop/a", "shop/b", 80, flow.Forwarded)
		f.SrcPort = uint16(i)
		select {
		case out <- f:
		case <-ctx.Done():
			return nil
		}
	}
}

// smallBuffers are accepted connections with a small send buffer, so a handler's
// writes to a client that reads nothing block after a few KB.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// A page whose connection stops taking data (the client reads nothing, its
// receive window and the server's send buffer full) is cut once a write waited
// stallTimeout: the handler returns and its Source request ends.
func TestStreamEndsWhenTheClientStopsReading(t *testing.T) {
	src := endlessSource{returned: make(chan struct{})}
	h := New(src)
	h.stallTimeout = 100 * time.Millisecond
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "GET /api/flows HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing from here on.
	select {
	case <-src.returned:
	case <-time.After(time.Minute):
		t.Fatal("the stream to a client that reads nothing was still open after a minute")
	}
}

// A source address holds at most streamsPerSource streams: one more is told so
// in a failure event (the page retries after it), and a stream closed frees its
// slot.
func TestStreamsPerSourceBounded(t *testing.T) {
	srv := serve(t, newFakeSource())
	open := func() (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/flows", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); resp.Body.Close() })
		return resp, cancel
	}
	var first context.CancelFunc
	for i := range streamsPerSource {
		resp, cancel := open()
		if e := readEvents(t, bufio.NewReader(resp.Body), 1)[0]; e.name != "hello" {
			t.Fatalf("stream %d: %+v, want hello", i+1, e)
		}
		if i == 0 {
			first = cancel
		}
	}
	resp, _ := open()
	if e := readEvents(t, bufio.NewReader(resp.Body), 1)[0]; e.name != "failure" || !strings.Contains(e.data, "flow streams open already") {
		t.Fatalf("stream %d: %+v, want a failure saying the address has its streams open", streamsPerSource+1, e)
	}
	first()
	testenv.WaitFor(t, "a stream after one was closed to be served", func() bool {
		resp, cancel := open()
		defer cancel()
		return readEvents(t, bufio.NewReader(resp.Body), 1)[0].name == "hello"
	})
}
