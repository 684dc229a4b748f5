package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
)

// streamBuffer is how many flows wait between the Source and a page's connection. A
// page that reads slower than flows arrive makes the Source drop (and count, with a
// LOST record) rather than this server buffer more.
const streamBuffer = 256

// keepAlive is how often an idle stream gets a comment line, so proxies keep it open
// and a closed page is noticed.
const keepAlive = 15 * time.Second

// stallTimeout is how long a stream waits for the page's connection to take one
// write (an event, a keep-alive, a flush) before it ends the stream: a client that
// stops reading at the TCP level would otherwise hold the handler, its Source
// stream and up to streamBuffer flows for ever. Keep-alives every keepAlive make
// any live page take a write well within it.
const stallTimeout = 30 * time.Second

// Streams per source address, and in all (connlimit.Bound): each holds a stream of
// the Source (a follower of every node, through the relay, whose nodes serve
// flowstore.MaxFollowers = 64 each) and up to streamBuffer flows. Viewers behind
// one ingress or port-forward share a source; 16 is 16 open pages. In all half the
// nodes' followers: the page is unauthenticated, and with 64 its viewers (or anyone
// who reaches it, holding streams whose filters match nothing) took every node's
// follow streams, so `hubble observe --follow` through the relay was refused.
const (
	streamsPerSource = 16
	streamsInAll     = 32
)

// hello is the stream's first event: what the page should keep and draw, and the
// server's clock, against which the page measures the window.
type hello struct {
	ServerTime    time.Time `json:"serverTime"`
	Keep          int       `json:"keep"`
	WindowSeconds float64   `json:"windowSeconds"`
	Namespaces    []string  `json:"namespaces,omitempty"`
}

// flows streams the page's flows as server-sent events: "hello", then one "flow"
// event per flow (LOST records included), and "failure" if the Source fails.
func (h *Handler) flows(w http.ResponseWriter, r *http.Request) {
	p, err := ParseParams(r.URL.Query())
	if err != nil {
		http.Error(w, "myelin ui: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	out := stallWriter{w: w, rc: http.NewResponseController(w), timeout: h.stallTimeout}
	defer out.extend() // the response's last chunk gets the same bound
	release, ok := h.streams.Take(r.RemoteAddr)
	if !ok {
		// A failure event, not an error status: the page's EventSource retries
		// after a stream ends, never after a status other than 200.
		fmt.Fprint(out, "retry: 3000\n\n")
		writeEvent(out, "failure", map[string]string{"error": fmt.Sprintf(
			"this address has %d flow streams open already (or the server %d in all): close a page", streamsPerSource, streamsInAll)})
		out.Flush()
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch := make(chan *flow.Flow, streamBuffer)
	errc := make(chan error, 1)
	go func() { errc <- h.src.Flows(ctx, p.Request(), ch) }()

	fmt.Fprint(out, "retry: 3000\n\n")
	first := hello{ServerTime: time.Now(), Keep: p.Keep, WindowSeconds: p.Window.Seconds(), Namespaces: p.Namespaces}
	if writeEvent(out, "hello", first) != nil || out.Flush() != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		var err error
		select {
		case f := <-ch:
			err = writeEvent(out, "flow", f)
		case err := <-errc:
			drain(out, ch)
			if err != nil && ctx.Err() == nil {
				writeEvent(out, "failure", map[string]string{"error": err.Error()})
				out.Flush()
			}
			return
		case <-tick.C:
			_, err = io.WriteString(out, ": keep-alive\n\n")
		case <-ctx.Done():
			return
		}
		if err != nil || (len(ch) == 0 && out.Flush() != nil) {
			return // the page went away, or stopped reading for stallTimeout
		}
	}
}

// stallWriter writes a response with a deadline of timeout from each write: a
// write or flush that a client does not take in time fails (and so does every
// later one), however long the stream has been open.
type stallWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (s stallWriter) Write(b []byte) (int, error) {
	s.extend()
	return s.w.Write(b)
}

// Flush sends what is buffered, within timeout.
func (s stallWriter) Flush() error {
	s.extend()
	return s.rc.Flush()
}

// extend moves the deadline to timeout from now. A ResponseWriter that has no
// deadlines (http.ErrNotSupported) writes without one.
func (s stallWriter) extend() { _ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout)) }

// drain writes what the Source sent before it returned.
func drain(w io.Writer, ch <-chan *flow.Flow) {
	for {
		select {
		case f := <-ch:
			if writeEvent(w, "flow", f) != nil {
				return
			}
		default:
			return
		}
	}
}

func writeEvent(w io.Writer, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", event, err)
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}
