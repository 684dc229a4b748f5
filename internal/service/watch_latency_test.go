package service

import (
	"testing"
	"time"
)

// The latency of a Service runs from its first event since it was last written, over
// events that pile up while it is queued, to the write; a write no event caused
// (a resync) reports nothing, and without OnSyncLatency nothing is tracked.
func TestWatcherSyncLatency(t *testing.T) {
	var got []time.Duration
	w := &Watcher{}
	w.eventSeen("a/x") // not tracked: no OnSyncLatency yet
	w.written("a/x")
	w.OnSyncLatency(func(d time.Duration) { got = append(got, d) })
	w.eventSeen("a/x")
	first := w.pending["a/x"]
	w.eventSeen("a/x") // a second event while queued keeps the first time
	if w.pending["a/x"] != first {
		t.Errorf("a second event moved the pending time from %v to %v", first, w.pending["a/x"])
	}
	w.written("a/x")
	w.written("a/x") // a resync write: no event pending
	w.written("b/y")
	if len(got) != 1 || got[0] < 0 {
		t.Fatalf("latencies reported: %v, want exactly one", got)
	}
	if len(w.pending) != 0 {
		t.Errorf("pending after the write: %v", w.pending)
	}
}
