package lab

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// healthClient is the HTTP client that probes a process's Health URL (through Dial:
// only over the lab's link from the machine's netns). Without files it
// presents no certificate and skips verifying the server: the probe learns only that
// the process answers, and the serving certificates are the lab's own. With files
// (etcd, which refuses clients without a certificate of its CA) it presents their
// client certificate and verifies the server against their CA.
func healthClient(files *labplan.TLSClient) (*http.Client, error) {
	cfg := &tls.Config{InsecureSkipVerify: true}
	if files != nil {
		cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			return nil, fmt.Errorf("load health-probe client certificate %s: %w", files.Cert, err)
		}
		pem, err := os.ReadFile(files.CA)
		if err != nil {
			return nil, fmt.Errorf("read health-probe CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("health-probe CA %s holds no PEM certificate", files.CA)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DialContext: Dial}}, nil
}
