package hubble

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// ServerTLS is where a Hubble server's TLS files are (PEM). With ClientCAFiles the
// server accepts only clients with a certificate they signed (mutual TLS).
type ServerTLS struct {
	CertFile, KeyFile string
	ClientCAFiles     []string
}

// Enabled says whether TLS is configured at all.
func (c ServerTLS) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || len(c.ClientCAFiles) > 0
}

// Credentials loads the files; what names the settings in errors (flags or keys).
func (c ServerTLS) Credentials(what string) (credentials.TransportCredentials, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("hubble TLS (%s): set both the certificate and the key file (got cert %q, key %q)", what, c.CertFile, c.KeyFile)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load hubble TLS certificate %s and key %s (%s): %w", c.CertFile, c.KeyFile, what, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if len(c.ClientCAFiles) > 0 {
		if cfg.ClientCAs, err = certPool(c.ClientCAFiles, what); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// ClientTLS is how the relay connects to TLS agents: it trusts CAFile, presents
// CertFile/KeyFile when set (for agents that require client certificates) and checks
// the agents' certificates for ServerName (one name for every agent; "" checks the
// address's host).
type ClientTLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// Enabled says whether TLS is configured at all.
func (c ClientTLS) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Credentials loads the files; what names the settings in errors.
func (c ClientTLS) Credentials(what string) (credentials.TransportCredentials, error) {
	if c.CAFile == "" {
		return nil, fmt.Errorf("hubble TLS to the agents (%s): set the CA file that signed their certificates", what)
	}
	pool, err := certPool([]string{c.CAFile}, what)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: c.ServerName}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("hubble TLS to the agents (%s): set both the client certificate and key file, or neither (got cert %q, key %q)", what, c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load hubble TLS client certificate %s and key %s (%s): %w", c.CertFile, c.KeyFile, what, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

func certPool(files []string, what string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read hubble TLS CA file (%s): %w", what, err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("hubble TLS CA file %s (%s): no PEM certificate in it", f, what)
		}
	}
	return pool, nil
}
