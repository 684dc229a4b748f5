package lab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// identity is one client certificate of the lab: who a component is to the apiserver.
type identity struct {
	file string // base name under pki/
	cn   string
	org  string
}

// identities returns the client identities the lab issues. Components use their
// standard Kubernetes identities so the apiserver's Node and RBAC authorizers apply.
func identities(p labplan.Plan) []identity {
	ids := []identity{
		{"admin", "myelin-admin", "system:masters"},
		{"kube-controller-manager", "system:kube-controller-manager", ""},
		{"kube-scheduler", "system:kube-scheduler", ""},
		{myelin.AgentUser, myelin.AgentUser, ""},
		// The apiserver's client towards the kubelets (exec, logs): full access there.
		{labplan.KubeletClientUser, labplan.KubeletClientUser, "system:masters"},
	}
	if p.Options.KubeProxy != "" {
		// Kubernetes' bootstrap RBAC binds system:node-proxier to this user.
		ids = append(ids, identity{KubeProxyUser, "system:kube-proxy", ""})
	}
	for _, n := range p.Nodes {
		ids = append(ids, identity{n.Name, "system:node:" + n.Name, "system:nodes"})
	}
	return ids
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// writePKI creates the lab CA, the apiserver's serving certificate, one client
// certificate per identity, the service-account signing key and etcd's certificates.
func writePKI(paths labplan.Paths, plan labplan.Plan) error {
	dir := paths.PKI()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeEtcdPKI(paths, plan.Addressing); err != nil {
		return err
	}
	ca, err := newCA("myelin-lab-ca")
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return err
	}
	a := plan.Addressing
	serving, err := ca.issue(pkix.Name{CommonName: "kube-apiserver"}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.IP(a.ControlPlaneIP().AsSlice()), net.IP(a.APIServerServiceIP().AsSlice()), net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	if err := writePair(dir, "apiserver", serving); err != nil {
		return err
	}
	for _, id := range identities(plan) {
		name := pkix.Name{CommonName: id.cn}
		if id.org != "" {
			name.Organization = []string{id.org}
		}
		kp, err := ca.issue(name, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
		if err != nil {
			return err
		}
		if err := writePair(dir, id.file, kp); err != nil {
			return err
		}
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// writeEtcdPKI creates etcd's own CA, etcd's serving certificate for the control-plane
// address and the one etcd client certificate (labplan.Paths.EtcdClientTLS). etcd
// trusts this CA alone, so the lab CA's many client certificates do not open it, and
// the CA's key is dropped once both are issued.
func writeEtcdPKI(paths labplan.Paths, a labplan.Addressing) error {
	ca, err := newCA("myelin-lab-etcd-ca")
	if err != nil {
		return err
	}
	client := paths.EtcdClientTLS()
	if err := writeCert(client.CA, ca); err != nil {
		return err
	}
	// Client use too: etcd's gRPC gateway (its JSON API) dials etcd's own client URL
	// presenting this certificate, which --client-cert-auth otherwise refuses.
	server, err := ca.issue(pkix.Name{CommonName: "myelin-lab-etcd"}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		nil, []net.IP{net.IP(a.ControlPlaneIP().AsSlice())})
	if err != nil {
		return err
	}
	if err := writeCert(paths.EtcdServerCert(), server); err != nil {
		return err
	}
	if err := writeKey(paths.EtcdServerKey(), server.key); err != nil {
		return err
	}
	kp, err := ca.issue(pkix.Name{CommonName: "myelin-lab-etcd-client"}, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return err
	}
	if err := writeCert(client.Cert, kp); err != nil {
		return err
	}
	return writeKey(client.Key, kp.key)
}

func newCA(cn string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return keyPair{}, fmt.Errorf("create CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	return keyPair{cert, key}, err
}

func (ca keyPair) issue(subject pkix.Name, usages []x509.ExtKeyUsage, dns []string, ips []net.IP) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("issue certificate for %s: %w", subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	return keyPair{cert, key}, err
}

func writePair(dir, name string, kp keyPair) error {
	if err := writeCert(filepath.Join(dir, name+".crt"), kp); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), kp.key)
}

func writeCert(path string, kp keyPair) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw}), 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
