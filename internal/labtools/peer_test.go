package labtools

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// testWait bounds what a test waits for on loopback: only a hang reaches it, never a
// slow machine (-race, parallel packages, CI's two loaded cores).
const testWait = 30 * time.Second

// TestPeer: over TCP, connected and unconnected UDP, Peer reports the address it
// talked to (no socket-LB here) and the lab server's answer; a bad protocol is
// refused by name.
func TestPeer(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Serve(ctx, addr, "peer-test", 0) }()
	for _, proto := range []string{"tcp", "udp-connected", "udp"} {
		var r PeerResult
		// Until Serve listens; then each exchange may take as long as a loaded
		// machine makes it (a lost reply is retried).
		for deadline := time.Now().Add(testWait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if r, err = Peer(ctx, addr, proto, 5*time.Second); err == nil {
				break
			}
		}
		if err != nil || r.Peer != addr || !strings.HasPrefix(r.Answer, "server=peer-test client=127.0.0.1") {
			t.Errorf("Peer %s: %+v, %v; want peer %s and the server's answer", proto, r, err, addr)
		}
	}
	if _, err := Peer(ctx, addr, "sctp", time.Second); err == nil || !strings.Contains(err.Error(), `"sctp"`) {
		t.Errorf("Peer sctp: %v, want an error naming the protocol", err)
	}
}
