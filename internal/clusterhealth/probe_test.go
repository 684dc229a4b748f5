package clusterhealth

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// The responder answers with its node's name; a probe of the right node succeeds, one
// that expected another node fails naming both, a closed port fails.
func TestHelloProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	srv, err := Serve(Hello{Node: "node-2", OverlayToNode: true}, []netip.Addr{lo}, port, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	// A bound for a hang only: ProbeTimeout (2 s) is the agent's, and a loaded machine
	// (-race, parallel packages) can take that long to run the responder's goroutine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if lat, h, err := hello(ctx, lo, lo, port, "node-2"); err != nil || lat <= 0 || !h.OverlayToNode {
		t.Errorf("hello node-2 = %v, %+v, %v; want a latency and its answer (overlay to node)", lat, h, err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, HelloPath))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !resp.Close { // a peer's idle connections would count against connlimit.Probes
		t.Errorf("the responder keeps the connection open after its answer, want it closed")
	}
	if _, _, err := hello(ctx, netip.Addr{}, lo, port, "node-3"); err == nil || !strings.Contains(err.Error(), `answered by node "node-2", not "node-3"`) {
		t.Errorf("hello expecting node-3 = %v; want the mismatch named", err)
	}
	if _, err := Serve(Hello{Node: "node-2"}, []netip.Addr{lo}, port, slog.Default()); err == nil || !strings.Contains(err.Error(), "cluster-health-port") {
		t.Errorf("second Serve on a taken port = %v; want an error naming cluster-health-port", err)
	}
	srv.Close()
	if _, _, err := hello(ctx, netip.Addr{}, lo, port, "node-2"); err == nil {
		t.Errorf("hello after Close succeeded")
	}
}
