package hubble

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/testpki"
)

var testServerTLSNames = ServerTLSNames{CertFile: "--cert", KeyFile: "--key", ClientCAFiles: "--client-cas", ClientNames: "--client-names"}

// A server with ClientNames admits only client certificates from its CAs that carry
// one of the names (a DNS name, or the common name of a certificate without one);
// without ClientNames any certificate the CAs signed is admitted.
func TestServerTLSClientNames(t *testing.T) {
	pki := testpki.New(t)
	other := testpki.New(t) // another CA
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	pki.Issue(t, "server", &x509.Certificate{DNSNames: []string{"server.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	pki.Issue(t, "relay", &x509.Certificate{DNSNames: []string{"relay.hubble.test"}, ExtKeyUsage: client})
	pki.Issue(t, "agent", &x509.Certificate{DNSNames: []string{"hubble.test"}, ExtKeyUsage: client})
	pki.Issue(t, "relay.hubble.test", &x509.Certificate{ExtKeyUsage: client})                                 // CN only
	pki.Issue(t, "relay-cn", &x509.Certificate{DNSNames: []string{"agent.hubble.test"}, ExtKeyUsage: client}) // CN "relay-cn"
	pki.Issue(t, "mixed", &x509.Certificate{DNSNames: []string{"x.test", "RELAY.hubble.test"}, ExtKeyUsage: client})
	other.Issue(t, "foreign", &x509.Certificate{DNSNames: []string{"relay.hubble.test"}, ExtKeyUsage: client})

	for _, tc := range []struct {
		name   string
		names  []string
		client string // certificate file prefix; "" presents none
		pki    *testpki.PKI
		ok     bool
	}{
		{"allowed DNS name", []string{"relay.hubble.test"}, "relay", pki, true},
		{"another name from the CA", []string{"relay.hubble.test"}, "agent", pki, false},
		{"common name without DNS names", []string{"relay.hubble.test"}, "relay.hubble.test", pki, true},
		{"common name ignored beside DNS names", []string{"relay-cn"}, "relay-cn", pki, false},
		{"one of several DNS names, any case", []string{"ui.hubble.test", "relay.hubble.test"}, "mixed", pki, true},
		{"allowed name from another CA", []string{"relay.hubble.test"}, "foreign", other, false},
		{"no certificate", []string{"relay.hubble.test"}, "", pki, false},
		{"no names: any certificate from the CA", nil, "agent", pki, true},
		{"no names: another CA still refused", nil, "foreign", other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds, err := ServerTLS{CertFile: pki.File("server.crt"), KeyFile: pki.File("server.key"),
				ClientCAFiles: []string{pki.File("ca.crt")}, ClientNames: tc.names}.Credentials(testServerTLSNames)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			b, err := os.ReadFile(pki.File("ca.crt"))
			if err != nil || !roots.AppendCertsFromPEM(b) {
				t.Fatalf("read ca.crt: %v", err)
			}
			cfg := &tls.Config{RootCAs: roots, ServerName: "server.test", MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}} // h2: gRPC insists on ALPN
			if tc.client != "" {
				cert, err := tls.LoadX509KeyPair(tc.pki.File(tc.client+".crt"), tc.pki.File(tc.client+".key"))
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{cert}
			}
			sc, cc := net.Pipe()
			done := make(chan error, 1)
			go func() {
				c := tls.Client(cc, cfg)
				done <- c.Handshake()
				// Read the server's verdict (an alert, or nothing until the server closes).
				c.Read(make([]byte, 1))
				cc.Close()
			}()
			_, _, err = creds.ServerHandshake(sc)
			sc.Close()
			<-done
			if tc.ok && err != nil {
				t.Errorf("server handshake: %v; want the client admitted", err)
			}
			if !tc.ok && err == nil {
				t.Errorf("server handshake admitted client %q; want it refused", tc.client)
			}
			if !tc.ok && err != nil && len(tc.names) > 0 && tc.pki == pki && tc.client != "" && !strings.Contains(err.Error(), "not among the allowed client names") {
				t.Errorf("server handshake: %v; want an error naming the allowed client names", err)
			}
		})
	}
}

// Client names without what they need, or written so that no certificate could match,
// stop the server with an error naming the setting.
func TestServerTLSClientNamesRefused(t *testing.T) {
	pki := testpki.New(t)
	pki.Issue(t, "server", &x509.Certificate{DNSNames: []string{"server.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	cert, key, ca := pki.File("server.crt"), pki.File("server.key"), []string{pki.File("ca.crt")}
	for _, tc := range []struct {
		name string
		tls  ServerTLS
		want string
	}{
		{"names without client CAs", ServerTLS{CertFile: cert, KeyFile: key, ClientNames: []string{"relay.test"}},
			"--client-names given without --client-cas"},
		{"names without certificate", ServerTLS{ClientNames: []string{"relay.test"}},
			"--client-names given without --cert and --key"},
		{"wildcard", ServerTLS{CertFile: cert, KeyFile: key, ClientCAFiles: ca, ClientNames: []string{"*.test"}},
			`--client-names: "*.test" is not a client name`},
		{"space", ServerTLS{CertFile: cert, KeyFile: key, ClientCAFiles: ca, ClientNames: []string{"a.test b.test"}},
			`--client-names: "a.test b.test" is not a client name`},
		{"empty", ServerTLS{CertFile: cert, KeyFile: key, ClientCAFiles: ca, ClientNames: []string{""}},
			`--client-names: "" is not a client name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.tls.Credentials(testServerTLSNames); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Credentials: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
