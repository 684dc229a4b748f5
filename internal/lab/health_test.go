package lab

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestHealthClientPresentsEtcdCertificate probes a server set up as the lab's etcd
// (its certificates, client certificates required) on loopback: the probe with the
// etcd client files gets through, one without them is refused in the handshake.
func TestHealthClientPresentsEtcdCertificate(t *testing.T) {
	paths := labplan.Paths{Dir: t.TempDir()}
	if err := os.MkdirAll(paths.PKI(), 0o700); err != nil {
		t.Fatal(err)
	}
	// A control-plane address of 127.0.0.1, where httptest listens.
	if err := writeEtcdPKI(paths, labplan.Addressing{SegmentA: netip.MustParsePrefix("127.0.0.0/24")}); err != nil {
		t.Fatal(err)
	}
	files := paths.EtcdClientTLS()
	serving, err := tls.LoadX509KeyPair(paths.EtcdServerCert(), paths.EtcdServerKey())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: poolOf(readCert(t, files.CA)),
		ClientAuth: tls.RequireAndVerifyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()

	with, err := healthClient(&files)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := with.Get(srv.URL + "/health")
	if err != nil {
		t.Fatalf("probe with the etcd client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("probe with the etcd client certificate: %s", resp.Status)
	}
	without, err := healthClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := without.Get(srv.URL + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("probe without a client certificate got %s, want a refused handshake", resp.Status)
	}
}

// Without the etcd client files on disk the probe fails at once, naming the file.
func TestHealthClientMissingFiles(t *testing.T) {
	files := labplan.Paths{Dir: t.TempDir()}.EtcdClientTLS()
	if _, err := healthClient(&files); err == nil {
		t.Error("healthClient with missing files: no error")
	}
}
