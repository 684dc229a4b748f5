package healthcheck

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	// The server starts in Run's goroutine.
	for deadline := time.Now().Add(testWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err = http.Get(url); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if !resp.Close { // a prober's idle connections would count against connlimit.Probes
		t.Errorf("%s keeps the connection open after its answer, want it closed", url)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// What the upstream e2e test ("should check kube-proxy urls") and load balancers read:
// 503 before the Services are synced, then 200 with "lastUpdated": ; /proxyMode 200.
func TestKubeProxyEndpoints(t *testing.T) {
	var synced atomic.Bool
	healthz, metrics := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var reports []error
	k := KubeProxy{HealthzAddr: healthz, MetricsAddr: metrics, Synced: synced.Load, Log: slog.New(slog.DiscardHandler),
		Report: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() }}
	wg.Add(1)
	go func() { defer wg.Done(); k.Run(ctx) }()

	if code, body := get(t, "http://"+healthz+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"lastUpdated": ""`) {
		t.Errorf("/healthz before sync: %d %q, want 503 with an empty lastUpdated", code, body)
	}
	synced.Store(true)
	for _, path := range []string{"/healthz", "/livez"} {
		if code, body := get(t, "http://"+healthz+path); code != http.StatusOK || !strings.Contains(body, `"lastUpdated": "20`) {
			t.Errorf("%s once synced: %d %q, want 200 with kube-proxy's JSON", path, code, body)
		}
	}
	if code, body := get(t, "http://"+metrics+"/proxyMode"); code != http.StatusOK || body != ProxyMode {
		t.Errorf("/proxyMode: %d %q, want 200 %q", code, body, ProxyMode)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 1 || reports[0] != nil {
		t.Errorf("reports = %v, want one nil (both addresses served)", reports)
	}
}

// An address in use (kube-proxy still running) is reported with the key to change, and
// the agent goes on.
func TestKubeProxyAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := KubeProxy{HealthzAddr: ln.Addr().String(), Synced: func() bool { return true }, Log: slog.New(slog.DiscardHandler),
		Report: func(err error) {
			select {
			case got <- err:
			default:
			}
		}}
	go k.Run(ctx)
	err = <-got
	if err == nil || !strings.Contains(err.Error(), "kube-proxy-replacement-healthz-bind-address") || !strings.Contains(err.Error(), "kube-proxy still running") {
		t.Errorf("report = %v, want the address in use, the key and the likely cause", err)
	}
}
