package cli

import (
	"bufio"
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/testpki"
)

type storedFlows []*flow.Flow

func (s storedFlows) Flows(ctx context.Context, _ flow.Request, out chan<- *flow.Flow) error {
	for _, f := range s {
		select {
		case out <- f:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// serveHubble serves a Hubble Observer API with one dropped flow on a loopback port,
// over creds (nil: plaintext), and returns its address.
func serveHubble(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	g := grpc.NewServer(opts...)
	hubble.Register(g, hubble.NewServer(hubble.Config{Node: "n1", Source: storedFlows{{
		Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Dropped, Protocol: "TCP", DstPort: 8080,
		Source: flow.Endpoint{IP: "10.244.0.5", Namespace: "shop", Pod: "client"}, Destination: flow.Endpoint{IP: "10.244.1.7"},
	}}}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// startUI runs UI with o until the test ends and returns the page's URL and the
// context its requests should use.
func startUI(t *testing.T, o UIOptions) (string, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- UI(ctx, pw, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("UI: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(strings.TrimSpace(line[strings.Index(line, "http://"):]), "/"), ctx
}

// firstFlow reads the page's flow stream until client's dropped flow to 8080 arrives.
func firstFlow(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/flows?keep=10", nil)
	req.Host = "myelin-ui"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/flows: status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read the stream: %v", err)
		}
		if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"pod":"client"`) {
			if !strings.Contains(l, `"verdict":"DROPPED"`) || !strings.Contains(l, `"dstPort":8080`) {
				t.Errorf("flow from the server: %s", l)
			}
			return
		}
	}
}

// TestUIServer: `myelin ui --server` serves the flows of a Hubble Observer API, and
// refuses a Host it was not given.
func TestUIServer(t *testing.T) {
	addr := serveHubble(t, nil)
	url, ctx := startUI(t, UIOptions{Listen: "127.0.0.1:0", Server: addr, AllowedHosts: []string{"myelin-ui"}})

	req, _ := http.NewRequest("GET", url+"/healthz", nil)
	req.Host = "evil.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.example.com: status %d, want 403", resp.StatusCode)
	}
	firstFlow(t, ctx, url)
}

// TestUIServerTLS: `myelin ui --server` with --tls-* reads a relay that requires client
// certificates (the chart's hubble.tls.enabled with hubble.ui.enabled).
func TestUIServerTLS(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "relay", &x509.Certificate{DNSNames: []string{"hubble.myelin.local"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	creds, err := hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"),
		ClientCAFiles: []string{pki.File("ca.crt")}}.Credentials(hubble.ServerTLSNames{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHubble(t, creds)
	url, ctx := startUI(t, UIOptions{Listen: "127.0.0.1:0", Server: addr, AllowedHosts: []string{"myelin-ui"},
		ServerTLS: hubble.ClientTLS{CAFile: pki.File("ca.crt"), CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"),
			ServerName: "hubble.myelin.local"}})
	firstFlow(t, ctx, url)
}

func TestUIServerBadFlags(t *testing.T) {
	for _, tc := range []struct {
		o    UIOptions
		want []string
	}{
		{UIOptions{Server: "relay"}, []string{"--server"}},
		{UIOptions{Server: "relay:4245", Socket: "/run/a.sock"}, []string{"--server"}},
		{UIOptions{Server: "relay:4245", ServerTLS: hubble.ClientTLS{ServerName: "hubble.myelin.local"}},
			[]string{"--tls-server-name given without --tls-ca-file", "add --tls-ca-file"}},
		{UIOptions{Server: "relay:4245", ServerTLS: hubble.ClientTLS{CAFile: "ca.crt", CertFile: "c.crt"}},
			[]string{"--tls-client-cert-file given without --tls-client-key-file", "add --tls-client-key-file"}},
		{UIOptions{ServerTLS: hubble.ClientTLS{CAFile: "ca.crt"}}, []string{"--tls-ca-file given without --server", "add --server"}},
	} {
		err := UI(context.Background(), io.Discard, tc.o)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("UI(%+v): %v, want an error saying %q", tc.o, err, w)
			}
		}
	}
}
