package agent

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/testpki"
)

// The agent's "hubble api" line says whether its TCP listener requires client
// certificates (a certificate without hubble-tls-client-ca-files is TLS anyone may
// read); hubble-tls-* keys without what they need stop it with an error naming them.
func TestServeHubbleTLS(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "agent", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	cert, key, ca := pki.File("agent.crt"), pki.File("agent.key"), pki.File("ca.crt")
	for _, tc := range []struct {
		name string
		hl   hubbleListen
		want string // in the log line, or in the error with err
		err  bool
	}{
		{name: "plaintext", hl: hubbleListen{Addr: "127.0.0.1:0"}, want: `tls=false client-certificates="not required"`},
		{name: "TLS without client CAs", hl: hubbleListen{Addr: "127.0.0.1:0", TLS: hubble.ServerTLS{CertFile: cert, KeyFile: key}},
			want: `tls=true client-certificates="not required"`},
		{name: "mutual TLS", hl: hubbleListen{Addr: "127.0.0.1:0", TLS: hubble.ServerTLS{CertFile: cert, KeyFile: key, ClientCAFiles: []string{ca}}},
			want: `tls=true client-certificates=required client-names=any`},
		{name: "mutual TLS with client names", hl: hubbleListen{Addr: "127.0.0.1:0", TLS: hubble.ServerTLS{CertFile: cert, KeyFile: key,
			ClientCAFiles: []string{ca}, ClientNames: []string{"relay.hubble.test", "other.test"}}},
			want: `tls=true client-certificates=required client-names=relay.hubble.test,other.test`},
		{name: "client names without client CAs", hl: hubbleListen{Addr: "127.0.0.1:0", TLS: hubble.ServerTLS{CertFile: cert, KeyFile: key,
			ClientNames: []string{"relay.hubble.test"}}},
			want: "hubble-tls-client-names given without hubble-tls-client-ca-files", err: true},
		{name: "client CAs without certificate", hl: hubbleListen{Addr: "127.0.0.1:0", TLS: hubble.ServerTLS{ClientCAFiles: []string{ca}}},
			want: "hubble-tls-client-ca-files given without hubble-tls-cert-file and hubble-tls-key-file", err: true},
		{name: "TLS without a TCP listener", hl: hubbleListen{TLS: hubble.ServerTLS{CertFile: cert, KeyFile: key}},
			want: "hubble-listen-address empty", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var log strings.Builder
			err := serveHubble(ctx, Config{Node: "n1", StateDir: t.TempDir()}, tc.hl, flowstore.New(16), slog.New(slog.NewTextHandler(&log, nil)))
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("serveHubble: %v; want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), tc.want) {
				t.Errorf("log %q: want %s", log.String(), tc.want)
			}
		})
	}
}

// The node's hubble socket follows beyond the flowstore.MaxFollowers that streams over
// the network (the TCP listener, the relay's) may hold: root on the node still sees
// the flows while the network's streams hold them all.
func TestServeHubbleSocketHasItsOwnFollowers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, dir := flowstore.New(16), t.TempDir()
	if err := serveHubble(ctx, Config{Node: "n1", StateDir: dir}, hubbleListen{Addr: addr}, store, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	follow := flow.Request{Follow: true}
	for range flowstore.MaxFollowers {
		go func() { _ = store.Flows(ctx, follow, make(chan *flow.Flow)) }()
	}
	waitStoreFollowers(t, store, flowstore.MaxFollowers)
	err = hubble.NewClientSource(addr, nil).Flows(ctx, follow, make(chan *flow.Flow))
	if err == nil || !strings.Contains(err.Error(), "too many follow streams") {
		t.Errorf("a follow over TCP with %d followers: %v, want refused", flowstore.MaxFollowers, err)
	}
	go func() {
		_ = hubble.NewClientSource("unix://"+HubbleSocket(dir), nil).Flows(ctx, follow, make(chan *flow.Flow))
	}()
	waitStoreFollowers(t, store, flowstore.MaxFollowers+1)
}

func waitStoreFollowers(t *testing.T, s *flowstore.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Stats().Followers != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) { // a hang guard, not a timing assertion
			t.Fatalf("%d followers, want %d", s.Stats().Followers, n)
		}
	}
}

// The agent API's /v1/flows is the node's own socket too: its follow streams are
// admitted while the network's hold flowstore.MaxFollowers.
func TestFlowsAPIHasItsOwnFollowers(t *testing.T) {
	a, _ := serveTest(t)
	store := flowstore.New(16)
	a.flows = store
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range flowstore.MaxFollowers {
		go func() { _ = store.Flows(ctx, flow.Request{Follow: true}, make(chan *flow.Flow)) }()
	}
	waitStoreFollowers(t, store, flowstore.MaxFollowers)
	go func() {
		_ = api.NewClient(a.cfg.socket()).Flows(ctx, url.Values{"follow": {"true"}}, func(*flow.Flow) error { return nil })
	}()
	waitStoreFollowers(t, store, flowstore.MaxFollowers+1)
}
