package relay

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/hubbletool"
	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/myelin-net/myelin/internal/testpki"
)

// An agent with mutual TLS is reached by a relay with the right client certificate
// and refuses one without; the relay's own TLS API refuses a plaintext client.
func TestRelayTLS(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "agent", &x509.Certificate{DNSNames: []string{"agent.hubble.myelin"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.Issue(t, "relay-client", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	pki.Issue(t, "relay", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})

	agentCreds, err := hubble.ServerTLS{CertFile: pki.File("agent.crt"), KeyFile: pki.File("agent.key"),
		ClientCAFiles: []string{pki.File("ca.crt")}}.Credentials(serverTLSFlags)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(hubble.ServerOptions(), grpc.Creds(agentCreds))...)
	hubble.Register(g, hubble.NewServer(hubble.Config{Node: "a", Source: &nodeSource{}}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	peer := Peer{Name: "a", Address: lis.Addr().String()}

	relayWith := func(peerTLS hubble.ClientTLS) observerpb.ObserverClient {
		peerCreds, err := peerTLS.Credentials(peerTLSFlags)
		if err != nil {
			t.Fatal(err)
		}
		serverCreds, err := hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key")}.Credentials(serverTLSFlags)
		if err != nil {
			t.Fatal(err)
		}
		r := New(Config{Discover: Static([]Peer{peer}), PeerCreds: peerCreds, ServerCreds: serverCreds, Timeout: testPeerTimeout})
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go r.Serve(ctx, rl)
		t.Cleanup(func() { cancel(); r.Close() })
		clientCreds, err := hubble.ClientTLS{CAFile: pki.File("ca.crt")}.Credentials(peerTLSFlags)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(rl.Addr().String(), grpc.WithTransportCredentials(clientCreds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		plain, err := grpc.NewClient(rl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { plain.Close() })
		if _, err := observerpb.NewObserverClient(plain).ServerStatus(context.Background(), &observerpb.ServerStatusRequest{}); err == nil {
			t.Error("a plaintext client got an answer from the TLS relay")
		}
		return observerpb.NewObserverClient(conn)
	}

	good := relayWith(hubble.ClientTLS{CAFile: pki.File("ca.crt"), CertFile: pki.File("relay-client.crt"),
		KeyFile: pki.File("relay-client.key"), ServerName: "agent.hubble.myelin"})
	st, err := good.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || st.GetNumConnectedNodes().GetValue() != 1 {
		t.Errorf("relay with a client certificate: status %v, %v; want node a connected", st, err)
	}
	noCert := relayWith(hubble.ClientTLS{CAFile: pki.File("ca.crt"), ServerName: "agent.hubble.myelin"})
	st, err = noCert.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || st.GetNumUnavailableNodes().GetValue() != 1 {
		t.Errorf("relay without a client certificate: status %v, %v; want node a unavailable (mutual TLS)", st, err)
	}
}

// Each TLS flag given without what TLS needs stops the relay with an error naming the
// flag given, the one missing and what to do, instead of serving or dialing plaintext.
func TestRunRefusesIncompleteTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  hubble.ServerTLS
		peer hubble.ClientTLS
		want []string
	}{
		{name: "peer server name without CA", peer: hubble.ClientTLS{ServerName: "agents.example"},
			want: []string{"--peer-tls-server-name given without --peer-tls-ca-file", "add --peer-tls-ca-file"}},
		{name: "peer certificate and key without CA", peer: hubble.ClientTLS{CertFile: "c.crt", KeyFile: "c.key"},
			want: []string{"--peer-tls-cert-file and --peer-tls-key-file given without --peer-tls-ca-file", "add --peer-tls-ca-file"}},
		{name: "peer certificate without key", peer: hubble.ClientTLS{CAFile: "ca.crt", CertFile: "c.crt"},
			want: []string{"--peer-tls-cert-file given without --peer-tls-key-file", "add --peer-tls-key-file"}},
		{name: "peer key without certificate", peer: hubble.ClientTLS{CAFile: "ca.crt", KeyFile: "c.key"},
			want: []string{"--peer-tls-key-file given without --peer-tls-cert-file", "add --peer-tls-cert-file"}},
		{name: "certificate without key", tls: hubble.ServerTLS{CertFile: "x.crt"},
			want: []string{"--tls-cert-file given without --tls-key-file", "add --tls-key-file"}},
		{name: "client CAs without certificate", tls: hubble.ServerTLS{ClientCAFiles: []string{"ca.crt"}},
			want: []string{"--tls-client-ca-files given without --tls-cert-file and --tls-key-file", "add --tls-cert-file and --tls-key-file"}},
		{name: "client names without client CAs", tls: hubble.ServerTLS{CertFile: "x.crt", KeyFile: "x.key", ClientNames: []string{"ui.test"}},
			want: []string{"--tls-client-names given without --tls-client-ca-files", "add --tls-client-ca-files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// ctx is already over: a relay that (wrongly) starts stops at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := Run(ctx, Options{Listen: "127.0.0.1:0", Peers: []string{"a=127.0.0.1:1"}, TLS: tc.tls, PeerTLS: tc.peer},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Run: %v; want an error saying %q", err, w)
				}
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (hubble.ClientTLS{CAFile: filepath.Join(dir, "ca.crt")}).Credentials(peerTLSFlags); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without PEM: %v", err)
	}
}

// The relay's startup line says whether its API requires client certificates: a TLS
// relay without --tls-client-ca-files lets anyone who connects read every flow.
func TestRunLogsClientCertificates(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "relay", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	for _, tc := range []struct {
		name string
		tls  hubble.ServerTLS
		want string
	}{
		{"plaintext", hubble.ServerTLS{}, `tls=false client-certificates="not required"`},
		{"TLS without client CAs", hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key")},
			`tls=true client-certificates="not required"`},
		{"mutual TLS", hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"), ClientCAFiles: []string{pki.File("ca.crt")}},
			`tls=true client-certificates=required client-names=any`},
		{"mutual TLS with client names", hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"), ClientCAFiles: []string{pki.File("ca.crt")},
			ClientNames: []string{"ui.hubble.test"}}, `tls=true client-certificates=required client-names=ui.hubble.test`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			lines := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Options{Listen: "127.0.0.1:0", Peers: []string{"a=127.0.0.1:1"}, TLS: tc.tls},
					slog.New(slog.NewTextHandler(lineWriter(lines), nil)))
			}()
			select {
			case line := <-lines:
				if !strings.Contains(line, tc.want) {
					t.Errorf("startup line %q: want %s", line, tc.want)
				}
			case err := <-done:
				t.Fatalf("Run ended before its startup line: %v", err)
			}
			cancel()
			<-done // its error (a server stopped before it served) does not matter here
		})
	}
}

// lineWriter sends each write (slog writes one line each) to lines.
type lineWriter chan<- string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// The upstream hubble CLI with its TLS flags against a relay requiring client
// certificates: with one it gets the status, without one it is refused.
func TestRelayTLSWithHubbleCLI(t *testing.T) {
	bin := hubbletool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs the hubble CLI: run make setup (scripts/build-hubble.sh)")
	}
	pki := testpki.New(t)
	pki.Issue(t, "relay", &x509.Certificate{DNSNames: []string{"relay.hubble.myelin"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.Issue(t, "client", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	creds, err := hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"),
		ClientCAFiles: []string{pki.File("ca.crt")}}.Credentials(serverTLSFlags)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Discover: Static([]Peer{startNode(t, "a", &nodeSource{})}), ServerCreds: creds, Timeout: testPeerTimeout})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Serve(ctx, lis)
	t.Cleanup(func() { cancel(); r.Close() })
	tlsArgs := []string{"status", "--server", lis.Addr().String(), "--tls", "--tls-server-name", "relay.hubble.myelin",
		"--tls-ca-cert-files", pki.File("ca.crt")}
	tlsArgs = append(tlsArgs, cliTimeouts...)
	out, err := exec.Command(bin, append(tlsArgs, "--tls-client-cert-file", pki.File("client.crt"), "--tls-client-key-file", pki.File("client.key"))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Connected Nodes: 1/1") {
		t.Errorf("hubble status with a client certificate: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, tlsArgs...).CombinedOutput(); err == nil {
		t.Errorf("hubble status without a client certificate succeeded:\n%s", out)
	}
}

// With --tls-client-names the relay's API admits only the named client (the UI), not
// another certificate from the same CA (an agent's).
func TestRelayTLSClientNames(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "relay", &x509.Certificate{DNSNames: []string{"relay.hubble.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.Issue(t, "ui", &x509.Certificate{DNSNames: []string{"ui.hubble.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	pki.Issue(t, "agent", &x509.Certificate{DNSNames: []string{"hubble.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	serverCreds, err := hubble.ServerTLS{CertFile: pki.File("relay.crt"), KeyFile: pki.File("relay.key"),
		ClientCAFiles: []string{pki.File("ca.crt")}, ClientNames: []string{"ui.hubble.test"}}.Credentials(serverTLSFlags)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Discover: Static(nil), ServerCreds: serverCreds, Timeout: testPeerTimeout})
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Serve(ctx, rl)
	t.Cleanup(func() { cancel(); r.Close() })
	status := func(client string) error {
		creds, err := hubble.ClientTLS{CAFile: pki.File("ca.crt"), CertFile: pki.File(client + ".crt"), KeyFile: pki.File(client + ".key"),
			ServerName: "relay.hubble.test"}.Credentials(peerTLSFlags)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(rl.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = observerpb.NewObserverClient(conn).ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
		return err
	}
	if err := status("ui"); err != nil {
		t.Errorf("the UI's certificate: %v; want the relay's status", err)
	}
	if err := status("agent"); err == nil {
		t.Error("an agent's certificate from the same CA got the relay's status; want it refused (not in --tls-client-names)")
	}
}
