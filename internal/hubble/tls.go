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
// and said in its startup line (ClientCertificates). With ClientNames as well, a
// client's certificate must also carry one of these names (ClientNameAllowed): a CA
// that signs certificates for several roles (agents, relay, UI) then admits only the
// role meant to read this server.
type ServerTLS struct {
	CertFile, KeyFile string
	ClientCAFiles     []string
	ClientNames       []string
}

// ServerTLSNames are what the user calls a ServerTLS's settings (flags or config
// keys), so that errors name what to change.
type ServerTLSNames struct {
	CertFile, KeyFile, ClientCAFiles, ClientNames string
}

// Enabled says whether any TLS setting is given.
func (c ServerTLS) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || len(c.ClientCAFiles) > 0 || len(c.ClientNames) > 0
}

// ClientNamesText says for a startup log line which client names are accepted: the
// names, or "any" (any certificate the client CAs signed, or no check at all without
// them).
func (c ServerTLS) ClientNamesText() string {
	if len(c.ClientNames) == 0 {
		return "any"
	}
	return strings.Join(c.ClientNames, ",")
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
		if len(c.ClientNames) > 0 {
			given = append(given, n.ClientNames)
		}
		return nil, fmt.Errorf("hubble TLS: %s given without %s: serving TLS needs the server's certificate and its private key; add %s, or drop %s to serve plaintext",
			and(given), and(missing), and(missing), and(given))
	}
	if len(c.ClientNames) > 0 && len(c.ClientCAFiles) == 0 {
		return nil, fmt.Errorf("hubble TLS: %s given without %s: client names are checked in the client certificates those CAs signed; add %s, or drop %s to accept any client",
			n.ClientNames, n.ClientCAFiles, n.ClientCAFiles, n.ClientNames)
	}
	if err := checkClientNames(c.ClientNames, n.ClientNames); err != nil {
		return nil, err
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
		if len(c.ClientNames) > 0 {
			cfg.VerifyConnection = verifyClientName(c.ClientNames)
		}
	}
	return credentials.NewTLS(cfg), nil
}

// verifyClientName refuses a client whose certificate (already verified against the
// client CAs) carries none of names. It runs as VerifyConnection, which, unlike
// VerifyPeerCertificate, also runs for resumed sessions.
func verifyClientName(names []string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("hubble TLS: the client presented no certificate")
		}
		cert := cs.PeerCertificates[0]
		if ClientNameAllowed(cert, names) {
			return nil
		}
		return fmt.Errorf("hubble TLS: client certificate %s is not among the allowed client names %s",
			certNames(cert), strings.Join(names, ", "))
	}
}

// ClientNameAllowed says whether cert names one of names: one of its DNS SANs, or its
// subject's common name when it has no DNS SAN (names compare case-insensitively, as
// DNS names do; no wildcards).
func ClientNameAllowed(cert *x509.Certificate, names []string) bool {
	own := cert.DNSNames
	if len(own) == 0 && cert.Subject.CommonName != "" {
		own = []string{cert.Subject.CommonName}
	}
	for _, o := range own {
		for _, n := range names {
			if strings.EqualFold(o, n) {
				return true
			}
		}
	}
	return false
}

// certNames describes a certificate's names for an error.
func certNames(cert *x509.Certificate) string {
	if len(cert.DNSNames) > 0 {
		return "with DNS names " + strings.Join(cert.DNSNames, ", ")
	}
	if cert.Subject.CommonName != "" {
		return "with common name " + cert.Subject.CommonName + " (no DNS name)"
	}
	return "without a DNS name or common name"
}

// checkClientNames refuses names that no certificate could match exactly: empty ones,
// ones with spaces or commas (a list written wrong), wildcards (compared literally,
// they would admit only a wildcard certificate, not the names it covers).
func checkClientNames(names []string, setting string) error {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, " \t,*") {
			return fmt.Errorf("hubble TLS: %s: %q is not a client name: give the exact DNS names (or common names) of the client certificates to accept, without spaces or wildcards", setting, n)
		}
	}
	return nil
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
