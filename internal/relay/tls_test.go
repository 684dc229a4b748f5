package relay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/hubbletool"
	"github.com/myelin-net/myelin/internal/testenv"
)

// testPKI writes a CA and certificates it signed into dir: name.crt, name.key.
type testPKI struct {
	dir  string
	ca   *x509.Certificate
	caKy *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	p.ca, p.caKy = p.issue(t, "ca", &x509.Certificate{IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	return p
}

func (p *testPKI) issue(t *testing.T, name string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if p.ca != nil {
		parent, signer = p.ca, p.caKy
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(p.dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, filepath.Join(p.dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func (p *testPKI) file(name string) string { return filepath.Join(p.dir, name) }

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// An agent with mutual TLS is reached by a relay with the right client certificate
// and refuses one without; the relay's own TLS API refuses a plaintext client.
func TestRelayTLS(t *testing.T) {
	pki := newPKI(t)
	pki.issue(t, "agent", &x509.Certificate{DNSNames: []string{"agent.hubble.myelin"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.issue(t, "relay-client", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	pki.issue(t, "relay", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})

	agentCreds, err := hubble.ServerTLS{CertFile: pki.file("agent.crt"), KeyFile: pki.file("agent.key"),
		ClientCAFiles: []string{pki.file("ca.crt")}}.Credentials("test")
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
		peerCreds, err := peerTLS.Credentials("test")
		if err != nil {
			t.Fatal(err)
		}
		serverCreds, err := hubble.ServerTLS{CertFile: pki.file("relay.crt"), KeyFile: pki.file("relay.key")}.Credentials("test")
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
		clientCreds, err := hubble.ClientTLS{CAFile: pki.file("ca.crt")}.Credentials("test")
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

	good := relayWith(hubble.ClientTLS{CAFile: pki.file("ca.crt"), CertFile: pki.file("relay-client.crt"),
		KeyFile: pki.file("relay-client.key"), ServerName: "agent.hubble.myelin"})
	st, err := good.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || st.GetNumConnectedNodes().GetValue() != 1 {
		t.Errorf("relay with a client certificate: status %v, %v; want node a connected", st, err)
	}
	noCert := relayWith(hubble.ClientTLS{CAFile: pki.file("ca.crt"), ServerName: "agent.hubble.myelin"})
	st, err = noCert.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || st.GetNumUnavailableNodes().GetValue() != 1 {
		t.Errorf("relay without a client certificate: status %v, %v; want node a unavailable (mutual TLS)", st, err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	if _, err := (hubble.ServerTLS{CertFile: "x.crt"}).Credentials("--tls-cert-file, --tls-key-file"); err == nil || !strings.Contains(err.Error(), "--tls-key-file") {
		t.Errorf("cert without key: %v, want an error naming the settings", err)
	}
	if _, err := (hubble.ClientTLS{CertFile: "x.crt"}).Credentials("--peer-tls-ca-file"); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("client cert without CA: %v, want an error asking for the CA file", err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ca.crt"), []byte("not pem"))
	if _, err := (hubble.ClientTLS{CAFile: filepath.Join(dir, "ca.crt")}).Credentials("x"); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without PEM: %v", err)
	}
}

// The upstream hubble CLI with its TLS flags against a relay requiring client
// certificates: with one it gets the status, without one it is refused.
func TestRelayTLSWithHubbleCLI(t *testing.T) {
	bin := hubbletool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs the hubble CLI: run make setup (scripts/build-hubble.sh)")
	}
	pki := newPKI(t)
	pki.issue(t, "relay", &x509.Certificate{DNSNames: []string{"relay.hubble.myelin"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.issue(t, "client", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	creds, err := hubble.ServerTLS{CertFile: pki.file("relay.crt"), KeyFile: pki.file("relay.key"),
		ClientCAFiles: []string{pki.file("ca.crt")}}.Credentials("test")
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
		"--tls-ca-cert-files", pki.file("ca.crt")}
	tlsArgs = append(tlsArgs, cliTimeouts...)
	out, err := exec.Command(bin, append(tlsArgs, "--tls-client-cert-file", pki.file("client.crt"), "--tls-client-key-file", pki.file("client.key"))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Connected Nodes: 1/1") {
		t.Errorf("hubble status with a client certificate: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, tlsArgs...).CombinedOutput(); err == nil {
		t.Errorf("hubble status without a client certificate succeeded:\n%s", out)
	}
}
