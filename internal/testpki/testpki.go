// Package testpki writes a throwaway CA and certificates it signed for tests of TLS
// (the Hubble relay, agents and `myelin ui`): one place instead of one per test package.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// PKI is a CA in a temporary directory: ca.crt, ca.key and, per Issue, name.crt and
// name.key (PEM).
type PKI struct {
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

// serial numbers the certificates of a test binary.
var serial atomic.Int64

// New writes a CA into a directory the test removes.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{dir: t.TempDir()}
	p.ca, p.key = p.Issue(t, "ca", &x509.Certificate{IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	return p
}

// Issue writes name.crt and name.key: a certificate from tmpl (its names, key usages)
// for CN name, valid for an hour around now, signed by the CA (the first one issued is
// the CA itself).
func (p *PKI) Issue(t testing.TB, name string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if p.ca != nil {
		parent, signer = p.ca, p.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write(t, p.File(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, p.File(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// File is the path of a file in the PKI's directory.
func (p *PKI) File(name string) string { return filepath.Join(p.dir, name) }

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
