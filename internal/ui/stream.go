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
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch := make(chan *flow.Flow, streamBuffer)
	errc := make(chan error, 1)
	go func() { errc <- h.src.Flows(ctx, p.Request(), ch) }()

	fmt.Fprint(w, "retry: 3000\n\n")
	first := hello{ServerTime: time.Now(), Keep: p.Keep, WindowSeconds: p.Window.Seconds(), Namespaces: p.Namespaces}
	if writeEvent(w, "hello", first) != nil || rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		var err error
		select {
		case f := <-ch:
			err = writeEvent(w, "flow", f)
		case err := <-errc:
			drain(w, ch)
			if err != nil && ctx.Err() == nil {
				writeEvent(w, "failure", map[string]string{"error": err.Error()})
				rc.Flush()
			}
			return
		case <-tick.C:
			_, err = io.WriteString(w, ": keep-alive\n\n")
		case <-ctx.Done():
			return
		}
		if err != nil || (len(ch) == 0 && rc.Flush() != nil) {
			return // the page went away
		}
	}
}

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
