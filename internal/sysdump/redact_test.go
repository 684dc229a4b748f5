package sysdump

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	const jwtTok = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLXZhbHVlLWhlcmU"
	cases := []struct {
		name, in string
		gone     []string // must not survive
		kept     []string // must survive
	}{
		{"jwt in a log", "auth with " + jwtTok + " ok", []string{jwtTok}, []string{"auth with", "ok"}},
		{"bearer header", "Authorization: Bearer abcdef0123456789", []string{"abcdef0123456789"}, []string{"Authorization: Bearer"}},
		{"json token field", `{"token": "s3cr3t-value", "node": "n1"}`, []string{"s3cr3t-value"}, []string{`"node": "n1"`, `"token": "[REDACTED]"`}},
		{"json escaped quote", `{"password":"a\"b","x":1}`, []string{`a\"b`}, []string{`"x":1`}},
		{"yaml key data", "users:\n- name: admin\n  client-key-data: LS0tLS1CRUdJTi\n", []string{"LS0tLS1CRUdJTi"}, []string{"name: admin"}},
		{"pem private key", "x\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\ny", []string{"MHcCAQEE"}, []string{"x\n", "\ny"}},
		{"certificate kept", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", nil, []string{"MIIB"}},
		{"env pair", "argv: myelin-agent API_TOKEN=abc123 --node n1", []string{"abc123"}, []string{"--node n1", "API_TOKEN="}},
		{"pod env entry", "\"env\": [\n {\n  \"name\": \"DB_PASSWORD\",\n  \"value\": \"hunter2\"\n }, {\"name\": \"MODE\", \"value\": \"fast\"}]", []string{"hunter2"}, []string{"DB_PASSWORD", `"value": "fast"`}},
		{"ordinary status", `{"mode": "native", "hostRouting": "bpf", "keys": 3}`, nil, []string{`"mode": "native"`, `"keys": 3`}},
	}
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
