package agent

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

func health(t *testing.T, a *server) (int, api.Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	a.handleHealth(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var h api.Health
	if err := json.NewDecoder(rec.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return rec.Code, h
}

// The agent is not ready, and refuses CNI ADD, until the Service watcher's first full
// pass is done; the reason says what it waits for.
func TestReadyOnlyAfterServicesSynced(t *testing.T) {
	a := &server{cfg: Config{Node: "n1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if code, h := health(t, a); code != http.StatusServiceUnavailable || h.Ready || h.Reason != notReadyStarting {
		t.Errorf("before start: %d %+v, want 503 starting", code, h)
	}
	synced := make(chan struct{})
	done := make(chan bool)
	go func() { done <- a.becomeReady(context.Background(), synced) }()
	for a.notReady.Load() == nil {
		time.Sleep(time.Millisecond) // becomeReady names its wait before blocking
	}
	code, h := health(t, a)
	if code != http.StatusServiceUnavailable || h.Ready || !strings.Contains(h.Reason, "Service sync") {
		t.Errorf("waiting for Services: %d %+v, want 503 naming the Service sync", code, h)
	}
	add := httptest.NewRecorder()
	a.ifReady(func(http.ResponseWriter, *http.Request) { t.Error("ADD served before the agent is ready") })(add,
		httptest.NewRequest(http.MethodPost, "/v1/ipam/c1", nil))
	if add.Code != http.StatusServiceUnavailable || !strings.Contains(add.Body.String(), "Service sync") {
		t.Errorf("ADD while waiting: %d %s, want 503 naming the Service sync", add.Code, add.Body)
	}
	close(synced)
	if !<-done {
		t.Fatal("becomeReady returned false")
	}
	if code, h := health(t, a); code != http.StatusOK || !h.Ready {
		t.Errorf("after the sync: %d %+v, want 200 ready", code, h)
	}
}

// Without kube-proxy-replacement there is nothing to wait for; a cancelled start is
// never ready.
func TestReadyWithoutServicesAndCancelled(t *testing.T) {
	a := &server{cfg: Config{Node: "n1"}}
	if !a.becomeReady(context.Background(), nil) || !a.ready.Load() {
		t.Error("kube-proxy-replacement off: not ready at once")
	}
	b := &server{cfg: Config{Node: "n1"}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.becomeReady(ctx, make(chan struct{})) || b.ready.Load() {
		t.Error("cancelled before the Service sync: reported ready")
	}
}
