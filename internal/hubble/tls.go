package hubble

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
)

// ServerTLS is where a Hubble server's TLS files are (PEM). With ClientCAFiles the
// server accepts only clients with a certificate they signed (mutual TLS); without
// them it serves TLS to anyone (encryption, no client authentication), which is allowed
// and said in its startup line (ClientCertificates).
type ServerTLS struct {
	CertFile, KeyFile string
	ClientCAFiles     []string
}

// ServerTLSNames are what the user calls a ServerTLS's settings (flags or config
// keys), so that errors name what to change.
type ServerTLSNames struct {
	CertFile, KeyFile, ClientCAFiles string
}

// Enabled says whether any TLS setting is given.
func (c ServerTLS) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || len(c.ClientCAFiles) > 0
}

// ClientCertificates says for a startup log line whether clients must present a
// certificate: "required" (mutual TLS) or "not required" (plaintext, or TLS without
// ClientCAFiles: whoever connects reads the flows).
func (c ServerTLS) ClientCertificates() string {
	if c.Enabled() && len(c.ClientCAFiles) > 0 {
		return "required"
	}
	return "not required"
}

// Credentials checks the settings and loads the files: nil (plaintext) when none is
// given. A setting given without the certificate and key TLS needs is an error naming
// them (n), never plaintext.
func (c ServerTLS) Credentials(n ServerTLSNames) (credentials.TransportCredentials, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		given, missing := settings{{n.CertFile, c.CertFile}, {n.KeyFile, c.KeyFile}}.split()
		if len(c.ClientCAFiles) > 0 {
			given = append(given, n.ClientCAFiles)
		}
		return nil, fmt.Errorf("hubble TLS: %s given without %s: serving TLS needs the server's certificate and its private key; add %s, or drop %s to serve plaintext",
			and(given), and(missing), and(missing), and(given))
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load hubble TLS certificate %s (%s) and key %s (%s): %w", c.CertFile, n.CertFile, c.KeyFile, n.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if len(c.ClientCAFiles) > 0 {
		if cfg.ClientCAs, err = certPool(c.ClientCAFiles, n.ClientCAFiles); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// ClientTLS is how a client (the relay to the agents, `myelin ui` to the relay)
// connects to a TLS Hubble server: it trusts CAFile, presents CertFile/KeyFile when set
// (for servers that require client certificates) and checks the server's certificate
// for ServerName (one name for every server; "" checks the address's host).
type ClientTLS struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// ClientTLSNames are what the user calls a ClientTLS's settings, and Server what the
// client connects to ("the agents", "the relay"), so that errors name what to change.
type ClientTLSNames struct {
	CAFile, CertFile, KeyFile, ServerName, Server string
}

// Enabled says whether any TLS setting is given: each of them asks for TLS.
func (c ClientTLS) Enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Given names the settings given ("--a, --b and --c"), for errors.
func (c ClientTLS) Given(n ClientTLSNames) string {
	given, _ := settings{{n.CAFile, c.CAFile}, {n.CertFile, c.CertFile}, {n.KeyFile, c.KeyFile}, {n.ServerName, c.ServerName}}.split()
	return and(given)
}

// Credentials checks the settings and loads the files: nil (plaintext) when none is
// given. A setting given without the CA file, or a certificate without its key, is an
// error naming them (n), never plaintext.
func (c ClientTLS) Credentials(n ClientTLSNames) (credentials.TransportCredentials, error) {
	if !c.Enabled() {
		return nil, nil
	}
	if c.CAFile == "" {
		given := c.Given(n)
		return nil, fmt.Errorf("hubble TLS to %s: %s given without %s: TLS needs the CA that signed the certificate of %s; add %s, or drop %s to connect in plaintext",
			n.Server, given, n.CAFile, n.Server, n.CAFile, given)
	}
	if c.CertFile == "" || c.KeyFile == "" {
		if given, missing := (settings{{n.CertFile, c.CertFile}, {n.KeyFile, c.KeyFile}}).split(); len(given) > 0 {
			return nil, fmt.Errorf("hubble TLS to %s: %s given without %s: a client certificate needs its private key and the key its certificate; add %s or drop %s",
				n.Server, and(given), and(missing), and(missing), and(given))
		}
	}
	pool, err := certPool([]string{c.CAFile}, n.CAFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: c.ServerName}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load hubble TLS client certificate %s (%s) and key %s (%s): %w", c.CertFile, n.CertFile, c.KeyFile, n.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// settings are named values, for errors that say which were given.
type settings []struct{ name, value string }

// split returns the names of the settings given and of those missing.
func (s settings) split() (given, missing []string) {
	for _, x := range s {
		if x.value != "" {
			given = append(given, x.name)
		} else {
			missing = append(missing, x.name)
		}
	}
	return given, missing
}

// and joins names: "a", "a and b", "a, b and c".
func and(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func certPool(files []string, name string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read hubble TLS CA file (%s): %w", name, err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("hubble TLS CA file %s (%s): no PEM certificate in it", f, name)
		}
	}
	return pool, nil
}
