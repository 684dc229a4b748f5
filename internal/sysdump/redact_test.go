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
		{"env entry DB_PASS", `{"name":"DB_PASS","value":"hunter2"}`, []string{"hunter2"}, []string{`"name":"DB_PASS"`}},
		{"env entry API_TOKEN", `{"name":"API_TOKEN","value":"abc"}`, []string{`"abc"`}, []string{`"name":"API_TOKEN"`}},
		{"env entry value first", `{"value":"hunter2","name":"DB_PASSWORD"}`, []string{"hunter2"}, []string{"DB_PASSWORD"}},
		{"env entry AUTH", `{"name": "AUTH_HEADER", "value": "xyz987"}`, []string{"xyz987"}, []string{"AUTH_HEADER"}},
		{"env entry ordinary", `{"name":"LOG_LEVEL","value":"debug"}`, nil, []string{`"value":"debug"`}},
		{"escaped json in an annotation", `{"a":"{\"password\":\"hunter3\",\"x\":1}"}`, []string{"hunter3"}, []string{`\"x\":1`}},
		{"basic auth header", "GET / Authorization: Basic dXNlcjpwYXNz\n", []string{"dXNlcjpwYXNz"}, []string{"Authorization: "}},
		{"short bearer", "Authorization: Bearer abc", []string{"abc"}, []string{"Authorization: "}},
		{"bearer in json header", `{"Authorization":"Bearer tok.en-1"}`, []string{"tok.en-1"}, nil},
		{"proxy authorization", "Proxy-Authorization: Digest username=\"u\", response=\"6629fae4\"", []string{"6629fae4"}, nil},
		{"url userinfo", "dial https://admin:hunter4@db.example:5432/x failed", []string{"hunter4"}, []string{"db.example:5432/x failed"}},
		{"openssh key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----\n", []string{"b3BlbnNzaC1rZXktdjE"}, nil},
		{"truncated pem key", "log: -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nMIIEcut", []string{"MIIEpAIBAAKCAQEA", "MIIEcut"}, []string{"log: "}},
		{"yaml env entry", "env:\n- name: DB_PASS\n  value: hunter2\n- name: MODE\n  value: fast\n", []string{"hunter2"}, []string{"DB_PASS", "value: fast"}},
		{"digest in json string", `{"msg":"Authorization: Digest username=\"u\", response=\"6629fae4\"","level":"info"}`, []string{"6629fae4"}, []string{`"level":"info"`}},
		{"not secret names kept", `{"name":"PASSTHROUGH","value":"on"} sessionAffinity: ClientIP` + "\nlevel=info msg=started node=n1 key=3", nil, []string{`"value":"on"`, "ClientIP", "node=n1", "key=3"}},
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
