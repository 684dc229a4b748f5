package healthcheck

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/service"
)

func TestResponse(t *testing.T) {
	hc := service.HealthCheck{Namespace: "default", Name: "web", Port: 31000, LocalEndpoints: 2}
	for _, tc := range []struct {
		name     string
		count    int
		healthy  bool
		wantCode int
	}{
		{"local endpoints", 2, true, 200},
		{"no local endpoint", 0, true, 503},
		{"services not synced yet", 2, false, 503},
	} {
		hc.LocalEndpoints = tc.count
		code, b := response(hc, tc.healthy)
		if code != tc.wantCode {
			t.Errorf("%s: code %d, want %d", tc.name, code, tc.wantCode)
		}
		// kube-proxy's body, byte for byte apart from whitespace.
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: body %q: %v", tc.name, b, err)
		}
		want := map[string]any{"service": map[string]any{"namespace": "default", "name": "web"},
			"localEndpoints": float64(tc.count), "serviceProxyHealthy": tc.healthy}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Errorf("%s: body %s, want %s", tc.name, gb, wb)
		}
	}
}

func TestPortOwners(t *testing.T) {
	got := portOwners(map[string]service.HealthCheck{
		"default/a": {Port: 31000}, "default/b": {Port: 31001}, "default/c": {Port: 31000},
	})
	if len(got) != 2 || got[31000] != "default/a" || got[31001] != "default/b" {
		t.Errorf("portOwners = %v, want 31000: default/a (first in order), 31001: default/b", got)
	}
}

// testServer is a Server whose listeners are on 127.0.0.1 with kernel-chosen ports.
type testServer struct {
	*Server
	mu    sync.Mutex
	addrs map[uint16]string
}

func newTestServer(t *testing.T, healthy *atomic.Bool) *testServer {
	ts := &testServer{addrs: map[uint16]string{}}
	ts.Server = New(healthy.Load, func(error) {}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts.listen = func(port uint16) (net.Listener, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			ts.mu.Lock()
			ts.addrs[port] = l.Addr().String()
			ts.mu.Unlock()
		}
		return l, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ts.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ts
}

// testWait bounds what a test waits for Run's goroutine to do: only a hang reaches
// it, never a slow machine (-race, parallel packages, CI's two loaded cores).
const testWait = 30 * time.Second

// get waits (bounded) until port has a listener and returns its answer to GET /any/path.
func (ts *testServer) get(t *testing.T, port uint16) (int, body) {
	t.Helper()
	for deadline := time.Now().Add(testWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ts.mu.Lock()
		addr := ts.addrs[port]
		ts.mu.Unlock()
		if addr != "" {
			resp, err := http.Get("http://" + addr + "/any/path")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if !resp.Close { // a prober's idle connections would count against connlimit.Probes
				t.Errorf("port %d keeps the connection open after its answer, want it closed", port)
			}
			var b body
			if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
				t.Fatalf("decode the answer of port %d: %v", port, err)
			}
			return resp.StatusCode, b
		}
	}
	t.Fatalf("no listener for port %d within %v", port, testWait)
	return 0, body{}
}

// The Server opens a listener per wanted port, answers from the Service's current
// state, and closes the listener when the Service goes.
func TestServerFollowsServices(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	ts := newTestServer(t, &healthy)
	ts.Update("default/web", &service.HealthCheck{Namespace: "default", Name: "web", Port: 31000, LocalEndpoints: 1})
	code, b := ts.get(t, 31000)
	if code != 200 || b.LocalEndpoints != 1 || b.Service.Name != "web" || b.Service.Namespace != "default" {
		t.Errorf("with one local endpoint: %d %+v, want 200 and localEndpoints 1", code, b)
	}
	ts.Update("default/web", &service.HealthCheck{Namespace: "default", Name: "web", Port: 31000, LocalEndpoints: 0})
	if code, b = ts.get(t, 31000); code != 503 || b.LocalEndpoints != 0 {
		t.Errorf("with no local endpoint: %d %+v, want 503", code, b)
	}
	ts.Update("default/web", &service.HealthCheck{Namespace: "default", Name: "web", Port: 31000, LocalEndpoints: 3})
	healthy.Store(false)
	if code, b = ts.get(t, 31000); code != 503 || b.ServiceProxyHealthy {
		t.Errorf("services not synced: %d %+v, want 503", code, b)
	}
	healthy.Store(true)

	ts.mu.Lock()
	addr := ts.addrs[31000]
	ts.mu.Unlock()
	ts.Update("default/web", nil)
	if len(ts.Ports()) != 0 {
		t.Errorf("ports after the Service went: %v", ts.Ports())
	}
	for deadline := time.Now().Add(testWait); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break // closed
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("listener still open %v after the Service went", testWait)
		}
	}
}
