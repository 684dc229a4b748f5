package agent

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

func get(t *testing.T, url string) (int, api.Health) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h
}

// Liveness answers from the first moment; readiness only once the API server is
// published and ready, saying what it waits for until then.
func TestHealthEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &healthServer{}
	h.serve(l, slog.Default())
	defer h.close()
	base := "http://" + l.Addr().String()

	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz before start-up = %d, want 200", code)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body.Reason, "starting") {
		t.Errorf("/readyz before the API server = %d %+v, want 503 starting", code, body)
	}
	src := &fakeReadiness{reason: "waiting for the first Service sync"}
	h.use(src)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || body.Reason != src.reason {
		t.Errorf("/readyz while not ready = %d %+v, want 503 %q", code, body, src.reason)
	}
	src.ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || !body.Ready {
		t.Errorf("/readyz when ready = %d %+v, want 200 ready", code, body)
	}
}

type fakeReadiness struct {
	ready  atomic.Bool
	reason string
}

func (f *fakeReadiness) readiness() (bool, string) { return f.ready.Load(), f.reason }
