package lab

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}

// TestEtcdPKI: etcd's serving certificate is for the control-plane address (and a
// client's, for etcd's own gateway), its one client certificate is a client's, both
// chain to an etcd CA that signed none of the lab's other certificates (a node's or the
// agent's do not open etcd) and whose key is not kept; the keys are the owner's only,
// in a directory only the owner enters.
func TestEtcdPKI(t *testing.T) {
	paths := labplan.Paths{Dir: t.TempDir()}
	plan, err := labplan.NewPlan(labplan.DefaultOptions(), labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	if err := writePKI(paths, plan); err != nil {
		t.Fatal(err)
	}
	files := paths.EtcdClientTLS()
	etcdCA := readCert(t, files.CA)
	if !etcdCA.IsCA {
		t.Fatalf("%s is no CA", files.CA)
	}
	server := readCert(t, paths.EtcdServerCert())
	if _, err := server.Verify(x509.VerifyOptions{Roots: poolOf(etcdCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("etcd's serving certificate does not chain to the etcd CA as a server: %v", err)
	}
	// etcd's gRPC gateway dials etcd itself with this certificate.
	if _, err := server.Verify(x509.VerifyOptions{Roots: poolOf(etcdCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("etcd's serving certificate is no client of etcd: %v", err)
	}
	if err := server.VerifyHostname(plan.Addressing.ControlPlaneIP().String()); err != nil {
		t.Errorf("etcd's serving certificate: %v", err)
	}
	client := readCert(t, files.Cert)
	if _, err := client.Verify(x509.VerifyOptions{Roots: poolOf(etcdCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the etcd client certificate does not chain to the etcd CA as a client: %v", err)
	}
	labCA := readCert(t, filepath.Join(paths.PKI(), "ca.crt"))
	if _, err := client.Verify(x509.VerifyOptions{Roots: poolOf(labCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("the etcd client certificate chains to the lab CA, which the apiserver trusts")
	}
	for _, id := range identities(plan) {
		c := readCert(t, filepath.Join(paths.PKI(), id.file+".crt"))
		if _, err := c.Verify(x509.VerifyOptions{Roots: poolOf(etcdCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
			t.Errorf("%s's certificate chains to the etcd CA, so it opens etcd", id.file)
		}
	}
	if _, err := os.Stat(filepath.Join(paths.PKI(), "etcd-ca.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the etcd CA's key was written (stat: %v)", err)
	}
	for path, want := range map[string]fs.FileMode{
		paths.PKI(): fs.ModeDir | 0o700, files.Key: 0o600, paths.EtcdServerKey(): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
}
