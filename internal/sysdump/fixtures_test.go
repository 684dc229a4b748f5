package sysdump

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/testpki"
)

// hubbleTLS is the chart's hubble.tls Secret as an install has it: tls.crt, tls.key and
// ca.crt from a throwaway CA (PEM), and the Secret's JSON with them base64-encoded as
// its .data.
type hubbleTLS struct {
	crt, key, ca string
	secretJSON   string
}

func newHubbleTLS(t testing.TB) hubbleTLS {
	t.Helper()
	p := testpki.New(t)
	p.Issue(t, "tls", &x509.Certificate{DNSNames: []string{"hubble.myelin.local"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	read := func(name string) string {
		b, err := os.ReadFile(p.File(name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	h := hubbleTLS{crt: read("tls.crt"), key: read("tls.key"), ca: read("ca.crt")}
	secret, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
		"metadata": map[string]any{"name": "hubble-tls", "namespace": "kube-system"},
		"data":     map[string]string{"tls.crt": b64(h.crt), "tls.key": b64(h.key), "ca.crt": b64(h.ca)},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.secretJSON = string(secret)
	return h
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// privateKeys are PEM private keys of every kind an install or a node holds, by name:
// PKCS#1 RSA, SEC 1 EC, PKCS#8, encrypted PKCS#8, legacy encrypted (Proc-Type
// headers) and OpenSSH; the bodies of the last three are random (their layout does
// not matter to redaction).
func privateKeys(t *testing.T) map[string]string {
	t.Helper()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 300)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	enc := func(b *pem.Block) string { return string(pem.EncodeToMemory(b)) }
	return map[string]string{
		"RSA":       enc(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}),
		"EC":        enc(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER}),
		"PKCS8":     enc(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"ENCRYPTED": enc(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: random}),
		"legacy encrypted RSA": enc(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: random,
			Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,BD744C34EA73CFFE79075C37CBABA1F0"}}),
		"OPENSSH": enc(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: random}),
	}
}

// keyBody is a line from the middle of a PEM block's body: what must not survive.
func keyBody(pemText string) string {
	lines := strings.Split(strings.TrimSpace(pemText), "\n")
	return lines[len(lines)/2]
}

// redactCase is one input of Redact: what must go, what must stay.
type redactCase struct {
	name, in string
	gone     []string // must not survive
	kept     []string // must survive
}

func checkRedact(t *testing.T, cases []redactCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := string(Redact([]byte(c.in)))
			for _, g := range c.gone {
				if strings.Contains(got, g) {
					t.Errorf("Redact(%q) = %q: still holds %q", c.in, got, g)
				}
			}
			for _, k := range c.kept {
				if !strings.Contains(got, k) {
					t.Errorf("Redact(%q) = %q: lost %q", c.in, got, k)
				}
			}
			if len(c.gone) > 0 && !strings.Contains(got, Redacted) {
				t.Errorf("Redact(%q) = %q: no %s marker", c.in, got, Redacted)
			}
		})
	}
}
