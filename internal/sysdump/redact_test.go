package sysdump

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	const jwtTok = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLXZhbHVlLWhlcmU"
	checkRedact(t, []redactCase{
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
		{"env entry in escaped json", `{"a":"{\"env\":[{\"name\":\"MY_API_TOKEN\",\"value\":\"tok123\"},{\"name\":\"MODE\",\"value\":\"fast\"}]}"}`,
			[]string{"tok123"}, []string{`\"MY_API_TOKEN\"`, `\"value\":\"fast\"`}},
		{"escaped json in an annotation", `{"a":"{\"password\":\"hunter3\",\"x\":1}"}`, []string{"hunter3"}, []string{`\"x\":1`}},
		{"basic auth header", "GET / Authorization: Basic dXNlcjpwYXNz\n", []string{"dXNlcjpwYXNz"}, []string{"Authorization: "}},
		{"short bearer", "Authorization: Bearer abc", []string{"abc"}, []string{"Authorization: "}},
		{"bearer in json header", `{"Authorization":"Bearer tok.en-1"}`, []string{"tok.en-1"}, nil},
		{"proxy authorization", "Proxy-Authorization: Digest username=\"u\", response=\"6629fae4\"", []string{"6629fae4"}, nil},
		{"url userinfo", "dial https://admin:hunter4@db.example:5432/x failed", []string{"hunter4"}, []string{"db.example:5432/x failed"}},
		{"url password without a user", "connect redis://:hunter4@cache:6379/0 refused", []string{"hunter4"}, []string{"cache:6379/0 refused"}},
		{"openssh key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----\n", []string{"b3BlbnNzaC1rZXktdjE"}, nil},
		{"truncated pem key", "log: -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nMIIEcut", []string{"MIIEpAIBAAKCAQEA", "MIIEcut"}, []string{"log: "}},
		{"yaml env entry", "env:\n- name: DB_PASS\n  value: hunter2\n- name: MODE\n  value: fast\n", []string{"hunter2"}, []string{"DB_PASS", "value: fast"}},
		{"digest in json string", `{"msg":"Authorization: Digest username=\"u\", response=\"6629fae4\"","level":"info"}`, []string{"6629fae4"}, []string{`"level":"info"`}},
		{"not secret names kept", `{"name":"PASSTHROUGH","value":"on"} sessionAffinity: ClientIP` + "\nlevel=info msg=started node=n1 key=3", nil, []string{`"value":"on"`, "ClientIP", "node=n1", "key=3"}},
		{"ordinary status", `{"mode": "native", "hostRouting": "bpf", "keys": 3}`, nil, []string{`"mode": "native"`, `"keys": 3`}},
		{"json number secret", `{"password": 123456, "node": "n1"}`, []string{"123456"}, []string{`"node": "n1"`, `"password": "[REDACTED]"`}},
		{"json number token", `{"token":98765432,"x":1}`, []string{"98765432"}, []string{`"x":1`}},
		{"escaped json number", `{"a":"{\"password\":123456,\"x\":1}"}`, []string{"123456"}, []string{`\"x\":1`}},
		{"key/value entry with a number", `{"key":"api-token","value":12345678}`, []string{"12345678"}, []string{`"key":"api-token"`}},
		{"yaml number", "password: 123456\nport: 8080\n", []string{"123456"}, []string{"port: 8080"}},
		{"booleans kept", "automountServiceAccountToken: false\nenableTokenAuth: true\n" + `{"automountServiceAccountToken": false}`, nil,
			[]string{"automountServiceAccountToken: false", "enableTokenAuth: true", `"automountServiceAccountToken": false`}},
		{"curl -u", "root 1 0 curl -sk -u admin:hunter2 https://10.0.0.1/x", []string{"hunter2"}, []string{"curl -sk -u admin:", "https://10.0.0.1/x"}},
		{"curl --user", `msg="exec: curl --user admin:hunter2 https://x"`, []string{"hunter2"}, []string{"--user admin:", "https://x"}},
		{"curl -u=", "curl -u=admin:hunter2 x", []string{"hunter2"}, []string{"-u=admin:"}},
		{"curl --user=", "curl --user=admin:hunter2 x", []string{"hunter2"}, []string{"--user=admin:"}},
		{"curl -u attached", "curl -uadmin:hunter2 x", []string{"hunter2"}, []string{"-uadmin:"}},
		{"curl -u quoted", `curl -u 'admin:hunter2' x`, []string{"hunter2"}, []string{"-u 'admin:"}},
		{"curl --proxy-user", "curl --proxy-user proxy:hunter2 x", []string{"hunter2"}, []string{"--proxy-user proxy:"}},
		{"curl -u in an args list", `"args": ["-u", "admin:hunter2", "https://x"]`, []string{"hunter2"}, []string{`"https://x"`}},
		{"token as a URL's user", "git clone https://0123456789abcdef0123456789abcdef01234567@github.com/o/r.git", []string{"0123456789abcdef"},
			[]string{"https://[REDACTED]@github.com/o/r.git"}},
		{"short URL user kept", "ssh://git@github.com/o/r.git", nil, []string{"ssh://git@github.com/o/r.git"}},
		{"url userinfo in a log", `level=error msg="clone https://oauth2:glsecret99@gitlab.example/x.git failed"`, []string{"glsecret99"}, []string{"gitlab.example/x.git"}},
		{"YAML in a JSON string", `{"data":{"config.yaml":"mode: x\npass: hunter2\n"}}`, []string{"hunter2"}, []string{"mode: x"}},
		{"JSON escaped twice", `{"a":"{\"b\":\"{\\\"password\\\":\\\"hunter7\\\",\\\"x\\\":1}\"}"}`, []string{"hunter7"}, []string{`x\\\":1`}},
		{"JSON number escaped twice", `{"a":"{\"b\":\"{\\\"token\\\":98765432}\"}"}`, []string{"98765432"}, nil},
		{"unsigned JWT", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJzeXN0ZW06YWRtaW4ifQ.\n", []string{"eyJzdWIiOiJzeXN0ZW06YWRtaW4ifQ"}, nil},
		{"JWT alone on a line", "\n" + jwtTok + "\n", []string{jwtTok[40:]}, nil},
		{"GitHub token alone", "ghp_0123456789abcdefABCDEF0123456789abcd\n", []string{"0123456789abcdefABCDEF"}, nil},
		{"GitHub fine-grained token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV01234", []string{"abcdefghijklmnopqrstuvwxyz"}, nil},
		{"GitLab token in a URL", "https://glpat-0123456789abcdefghij@gitlab.example/x.git", []string{"0123456789abcdefghij"}, []string{"gitlab.example/x.git"}},
		{"EKS token", "k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8_QWN0aW9uPUdldENhbGxlcklkZW50aXR5", []string{"aHR0cHM6Ly9zdHMuYW1hem9u"}, nil},
		{"Google access token", "ya29.a0AfB_byC0123456789abcdefghijklmnop", []string{"a0AfB_byC0123456789"}, nil},
		{"kubeadm certificate key", "kubeadm join 10.0.0.1:6443 --control-plane --certificate-key 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			[]string{"0123456789abcdef0123456789abcdef"}, []string{"--control-plane"}},
		{"key names in any spelling", `{"api_key":"s3cr3t1"}` + "\napiKey: s3cr3t2\n" + `msg="GET /x X-API-Key: s3cr3t3"` + "\n" + `{"keyData":"s3cr3t4","certificateKey":"s3cr3t5"}`,
			[]string{"s3cr3t1", "s3cr3t2", "s3cr3t3", "s3cr3t4", "s3cr3t5"}, nil},
		{"map dump keys kept", `{"key": ["0x0a", "0x00"], "value": ["0x01"]}` + "\nkey=3 keys=4", nil, []string{`"value": ["0x01"]`, "key=3"}},
		{"two bootstrap tokens, one too long", "a abcdef.0123456789abcdef b 123456.abcdefabcdefabcd c abcdef.0123456789abcdefg x_abcdef.0123456789abcdef",
			[]string{"0123456789abcdef ", "abcdefabcdefabcd"}, []string{"abcdef.0123456789abcdefg", "x_abcdef.0123456789abcdef"}},
		{"YAML list of tokens", "tokens:\n- s3cr3t1\n- s3cr3t2\nother:\n  passwords:\n    - \"s3cr3t3\"\n  mode: x\n", []string{"s3cr3t1", "s3cr3t2", "s3cr3t3"}, []string{"other:", "mode: x"}},
		{"JSON list of tokens", `{"tokens": ["s3cr3t1", "s3cr3t2"], "ports": [80, 443]}`, []string{"s3cr3t1", "s3cr3t2"}, []string{`"ports": [80, 443]`}},
		// What sysdump's own indented JSON writes, and values a few lines below their
		// names: the hot lines reach the list's ] and the value's closing quote, and
		// blank lines don't count in their window.
		{"indented JSON list of tokens", "{\n  \"tokens\": [\n    \"s3cr3t1\",\n    \"s3cr3t2\",\n    \"s3cr3t3\"\n  ],\n  \"ports\": [\n    80\n  ]\n}",
			[]string{"s3cr3t1", "s3cr3t2", "s3cr3t3"}, []string{`"ports"`, "80"}},
		{"quoted value over lines", "export PASSWORD=\"line1\nline2\nline3\nline4\nline5s3cr3t\"\nexport MODE=fast\n", []string{"line5s3cr3t"}, []string{"MODE=fast"}},
		{"JSON value below blank lines", "{\"password\":\n\n\n\n  \"s3cr3tP\", \"mode\": \"fast\"}", []string{"s3cr3tP"}, []string{`"mode": "fast"`}},
		{"env value below blank lines", "  - name: DB_TOKEN\n\n\n\n    value: s3cr3t9\n  - name: MODE\n    value: fast\n", []string{"s3cr3t9"}, []string{"value: fast"}},
		{"bearer token on the next line", "Authorization: Bearer\n  abcdef0123456789tok\n", []string{"abcdef0123456789tok"}, nil},
		// A key after "bearer" (a scheme's name, then a secret's) is judged by the name
		// rules, not taken for the token: its name stays, its value goes.
		{"bearer then a token key", "auth:\n  type: bearer\n\n  token: abc123\n", []string{"abc123"}, []string{"token:"}},
		{"bearer then a client_secret key", "scheme: Bearer\n\n\nclient_secret: hunter2\n", []string{"hunter2"}, []string{"client_secret:"}},
		{"bearer then an apiKey key", "type: bearer\n\n  apiKey: hunter2\n", []string{"hunter2"}, []string{"apiKey:"}},
		{"bearer then a password key", "auth: bearer\n\npassword: hunter2\n", []string{"hunter2"}, []string{"password:"}},
		{"lists of references kept", "imagePullSecrets:\n- name: regcred\nsecrets:\n  - name: sa-token-x\nenv:\n- name: DB_URL\n  valueFrom:\n    secretKeyRef:\n      name: db\n      key: url\n",
			nil, []string{"name: regcred", "name: sa-token-x", "name: db", "key: url"}},
		{"ids and digests kept", "containerID=containerd://0b9e4c1a5c1e4f3b9d7a2f1e6c3b8a900b9e4c1a5c1e4f3b9d7a2f1e6c3b8a90 image=nginx@sha256:0b9e4c1a5c1e4f3b9d7a2f1e6c3b8a900b9e4c1a5c1e4f3b9d7a2f1e6c3b8a90 uid=0b9e4c1a-5c1e-4f3b-9d7a-2f1e6c3b8a90",
			nil, []string{"containerd://0b9e4c1a5c1e4f3b9d7a2f1e6c3b8a900b9e4c1a5c1e4f3b9d7a2f1e6c3b8a90", "sha256:0b9e4c1a5c1e4f3b9d7a2f1e6c3b8a900b9e4c1a5c1e4f3b9d7a2f1e6c3b8a90", "0b9e4c1a-5c1e-4f3b-9d7a-2f1e6c3b8a90"}},
	})
}

// Private keys of every PEM kind go, as text, inside JSON strings, cut off, and
// base64-encoded (a Secret's .data, a kubeconfig's client-key-data, wrapped over YAML
// lines); certificates stay.
func TestRedactPrivateKeys(t *testing.T) {
	var cases []redactCase
	for kind, key := range privateKeys(t) {
		body := keyBody(key)
		enc := b64(key)
		inJSON, _ := json.Marshal(map[string]string{"tls.key": key, "note": "kept-note"})
		inAnnotation, _ := json.Marshal(map[string]string{"doc": string(inJSON)})
		wrapped := "tls.key: |\n"
		for i := 0; i < len(enc); i += 76 {
			wrapped += "  " + enc[i:min(i+76, len(enc))] + "\n"
		}
		lastLine := enc[(len(enc)-1)/76*76:]
		wrappedJSON, _ := json.Marshal(map[string]string{"blob": strings.ReplaceAll(strings.TrimSpace(wrapped[len("tls.key: |\n"):]), "\n  ", "\r\n"), "note": "kept-note"})
		cases = append(cases,
			redactCase{kind + " PEM", "x\n" + key + "y", []string{body}, []string{"x\n", "\ny"}},
			redactCase{kind + " PEM in JSON", string(inJSON), []string{body}, []string{"kept-note"}},
			redactCase{kind + " PEM in JSON in JSON", string(inAnnotation), []string{body}, nil},
			redactCase{kind + " PEM cut off", "log: " + key[:len(key)*2/3], []string{body}, []string{"log: "}},
			redactCase{kind + " base64 YAML", "data:\n  hubble.pem: " + enc + "\n  mode: x\n", []string{enc[80:120]}, []string{"mode: x"}},
			redactCase{kind + " base64 JSON", `{"data":{"key.pem":"` + enc + `"},"kind":"ConfigMap"}`, []string{enc[80:120]}, []string{`"kind":"ConfigMap"`}},
			redactCase{kind + " base64 wrapped", wrapped + "mode: x\n", []string{enc[80:120], enc[len(enc)-30:]}, []string{"mode: x"}},
			redactCase{kind + " base64 cut off", "log: " + enc[:len(enc)/2], []string{enc[80:120]}, nil},
			redactCase{kind + " PEM CRLF", "x\r\n" + strings.ReplaceAll(key, "\n", "\r\n") + "y", []string{body}, []string{"x\r\n", "\r\ny"}},
			redactCase{kind + " base64 wrapped CRLF", strings.ReplaceAll(wrapped, "\n", "\r\n") + "mode: x\r\n", []string{enc[80:120], lastLine},
				[]string{"mode: x\r\n"}},
			redactCase{kind + " base64 wrapped CRLF in JSON", string(wrappedJSON), []string{enc[80:120], lastLine}, []string{"kept-note"}},
		)
	}
	h := newHubbleTLS(t)
	cases = append(cases,
		redactCase{"certificate kept", h.crt, nil, []string{keyBody(h.crt)}},
		redactCase{"base64 certificate kept", "ca.crt: " + b64(h.ca) + "\n", nil, []string{b64(h.ca)}},
	)
	checkRedact(t, cases)
}

// What an install's objects, kubeconfigs, command lines and logs hold: the chart's
// hubble-tls Secret (in a last-applied annotation), ServiceAccount and bootstrap
// tokens, image pull credentials, kubeconfigs of the agent and the CNI plugin.
func TestRedactInstall(t *testing.T) {
	h := newHubbleTLS(t)
	key := b64(h.key)
	// An object with a last-applied Secret, logged as a string in a JSON log line:
	// the Secret's JSON is escaped twice.
	appliedSecret, _ := json.Marshal(map[string]any{"kind": "Secret", "metadata": map[string]string{"name": "db"},
		"stringData": map[string]string{"password": "hunter8"}, "data": map[string]string{"tls.key": key}})
	appliedObject, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{lastApplied: string(appliedSecret)}}})
	loggedLastApplied, _ := json.Marshal(map[string]string{"msg": "applied", "object": string(appliedObject)})
	lastApplied, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": h.secretJSON}}})
	const saJWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJlLXZhbHVlLWhlcmU"
	docker := b64(`{"auths":{"registry.example":{"username":"ci","password":"hunter6","auth":"Y2k6aHVudGVyNg=="}}}`)
	cniKubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://10.0.0.1:6443\n" +
		"    certificate-authority-data: " + b64(h.ca) + "\nusers:\n- name: myelin-cni\n  user:\n    token: " + saJWT + "\n" +
		"    client-certificate-data: " + b64(h.crt) + "\n    client-key-data: " + key + "\n"
	checkRedact(t, []redactCase{
		{"hubble-tls Secret", h.secretJSON, []string{key[40:80]}, []string{"hubble-tls", `"type":"kubernetes.io/tls"`}},
		{"Secret in last-applied annotation", string(lastApplied), []string{key[40:80]}, []string{"hubble-tls"}},
		{"Secret data of any key", `{"kind":"Secret","data":{"hmac":"c2VjcmV0LWJ5dGVz"},"metadata":{"name":"webhook"}}`,
			[]string{"c2VjcmV0LWJ5dGVz"}, []string{"webhook"}},
		{"Secret stringData in YAML", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  url: postgres-db-7\n  seed: s33d-v4lue\ntype: Opaque\n",
			[]string{"postgres-db-7", "s33d-v4lue"}, []string{"name: db", "type: Opaque"}},
		{"ServiceAccount token base64 under any key", `{"kind":"Secret","data":{"jwt":"` + b64(saJWT) + `"}}`, []string{b64(saJWT)[:40]}, nil},
		{"dockerconfigjson", `{"data":{".dockerconfigjson":"` + docker + `"}}`, []string{docker[:40]}, nil},
		{"CNI kubeconfig", cniKubeconfig, []string{saJWT[:40], key[40:80]},
			[]string{"server: https://10.0.0.1:6443", "certificate-authority-data: " + b64(h.ca), "client-certificate-data: " + b64(h.crt)}},
		{"bootstrap token in kubeadm join", "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:aaaa",
			[]string{"0123456789abcdef"}, []string{"kubeadm join 10.0.0.1:6443"}},
		{"bootstrap token in a log", `msg="joining with bootstrap token abcdef.0123456789abcdef"`, []string{"0123456789abcdef"}, []string{"joining"}},
		{"--token VALUE in a process list", "root 1 0 kubelet --token s3cr3tv4lue --node-ip 10.0.0.2", []string{"s3cr3tv4lue"}, []string{"--node-ip 10.0.0.2"}},
		{"--password VALUE", "ps: app --password hunter22 --verbose", []string{"hunter22"}, []string{"--verbose"}},
		{"args list", `"args": ["--token", "s3cr3tv4lue", "--node=n1"]`, []string{"s3cr3tv4lue"}, []string{`"--node=n1"`}},
		{"indented args list", "\"args\": [\n  \"--client-secret\",\n  \"s3cr3tv4lue\",\n  \"--v=2\"\n]", []string{"s3cr3tv4lue"}, []string{`"--v=2"`}},
		{"relay args kept", `"args": ["relay", "--tls-key-file=/etc/myelin/hubble-tls/tls.key", "--peer-tls-server-name=hubble.myelin.local"]`,
			nil, []string{"/etc/myelin/hubble-tls/tls.key", "hubble.myelin.local"}},
		{"quoted NAME=value", `export GITHUB_TOKEN="ghp_s3cr3tv4lue" level=info`, []string{"s3cr3tv4lue"}, []string{"level=info"}},
		{"quoted key=value in a text log", `time=x level=INFO msg=hi token="s3cr3t v4lue" node=n1`, []string{"s3cr3t v4lue"}, []string{"node=n1"}},
		{"YAML block scalar", "password: |\n  hunter22\n  hunter23\nmode: x\n", []string{"hunter22", "hunter23"}, []string{"mode: x"}},
		{"YAML env block value", "env:\n- name: DB_PASSWORD\n  value: >-\n    hunter22\n- name: MODE\n  value: fast\n", []string{"hunter22"}, []string{"value: fast"}},
		{"YAML env value first", "- value: tok123\n  name: MY_API_TOKEN\n", []string{"tok123"}, []string{"MY_API_TOKEN"}},
		{"token header inside a log line", `level=info msg="retry" headers="X-Auth-Token: s3cr3tv4lue, Accept: */*"`, []string{"s3cr3tv4lue"}, []string{"Accept: */*"}},
		{"password: inside a log line", `E1201 12:00:00 login.go:9] db login password: hunter22 refused`, []string{"hunter22"}, []string{"refused"}},
		{"Go %+v of a struct", `msg="client config" cfg={Host:https://10.0.0.1:6443 BearerToken:s3cr3tv4lue Username: Password:hunter22 QPS:5}`,
			[]string{"s3cr3tv4lue", "hunter22"}, []string{"Host:https://10.0.0.1:6443", "QPS:5"}},
		{"PGP private key", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGZ3c2VjcmV0a2V5\n-----END PGP PRIVATE KEY BLOCK-----\n", []string{"lQOYBGZ3c2VjcmV0a2V5"}, nil},
		{"config view entry", `{"node":"n1","effective":[{"key":"api-token","value":"s3cr3tv4lue","source":"ConfigMap kube-system/myelin-config"},` +
			`{"key":"hubble-tls-key-file","value":"/etc/myelin/hubble-tls/tls.key","source":"ConfigMap kube-system/myelin-config"}]}`,
			[]string{"s3cr3tv4lue"}, []string{`"key":"api-token"`, "/etc/myelin/hubble-tls/tls.key"}},
		{"Secret data in flow style", "apiVersion: v1\nkind: Secret\ndata: {tls.key: LS0tLS1CRUdJTi, password: cGFzcw==}\ntype: Opaque\n",
			[]string{"LS0tLS1CRUdJTi", "cGFzcw"}, []string{"kind: Secret", "type: Opaque"}},
		{"Secret stringData in flow style over lines", "kind: Secret\nstringData: {url: postgres-db-7,\n  seed: s33d-v4lue}\nmetadata:\n  name: db\n",
			[]string{"postgres-db-7", "s33d-v4lue"}, []string{"name: db"}},
		{"Secret in a YAML list", "kind: List\nitems:\n- kind: Secret\n  data:\n    hmac: c2VjcmV0LWJ5dGVz\n  metadata:\n    name: webhook\n",
			[]string{"c2VjcmV0LWJ5dGVz"}, []string{"name: webhook"}},
		{"last-applied Secret in a JSON log line", string(loggedLastApplied), []string{"hunter8", key[40:80]}, []string{"applied"}},
		{"Secret references kept", `{"secret":{"secretName":"hubble-tls","defaultMode":256},"secretKeyRef":{"name":"db","key":"url"}}`,
			nil, []string{`"secretName":"hubble-tls"`, `"name":"db"`}},
		{"file paths kept", `{"hubble-tls-key-file":"/etc/myelin/hubble-tls/tls.key","token-file":"/var/run/secrets/token"}`,
			nil, []string{"/etc/myelin/hubble-tls/tls.key", "/var/run/secrets/token"}},
	})
}

// The words Redact looks for before it runs the rules matched by a name find every
// name secretName says yes to, in the spellings names have; a part or word added
// to secretName needs its spellings here.
func TestSecretWordsFindSecretNames(t *testing.T) {
	spellings := map[string][]string{
		"token": {"token", "API_TOKEN", "authToken"}, "password": {"password", "DB_PASSWORD", "dbPassword"},
		"passwd": {"passwd", "PASSWD"}, "secret": {"client-secret", "clientSecret", "SECRET"},
		"apikey": {"api_key", "apiKey", "X-API-Key", "APIKEY"}, "privatekey": {"private_key", "privateKey", "PRIVATE-KEY"},
		"credential": {"credentials", "awsCredentials"}, "keydata": {"client-key-data", "keyData", "KEY_DATA"},
		"clientkey": {"client-key", "clientKey"}, "accesskey": {"access_key", "AccessKey", "AWS_ACCESS_KEY_ID"},
		"certificatekey": {"certificate-key", "certificateKey"}, "dockerconfig": {".dockerconfigjson", "docker-config", "DockerConfig"},
		"dockercfg": {".dockercfg", "docker_cfg"},
		"pass":      {"DB_PASS", "pass"}, "pwd": {"PWD", "db-pwd"}, "auth": {"X-Auth", "auth"},
		"authorization": {"Authorization", "proxy-authorization"}, "cookie": {"Cookie", "set-cookie"},
	}
	for _, part := range append(append([]string(nil), secretParts...), secretNameWords...) {
		names, ok := spellings[part]
		if !ok {
			t.Errorf("no spellings of %q", part)
		}
		for _, name := range names {
			if !secretName(name) {
				t.Errorf("secretName(%q) = false: not a spelling of %q", name, part)
			}
			if !mayNameSecret([]byte(`"` + name + `": x`)) {
				t.Errorf("secretWords miss %q", name)
			}
		}
	}
}

// The window never cuts a match short: base64Run finds the same match in the window
// as in the whole text, for text made of runs, padding, line breaks, indentation and
// escapes in random order (a seeded property check).
func TestBase64WindowKeepsTheMatch(t *testing.T) {
	parts := []string{strings.Repeat("QUJD", 10), strings.Repeat("eHl6", 16), "QUJD", "=", "==", "\r", "\n", "\r\n", " ", "\t",
		`\n`, `\r`, `\r\n`, `\t`, `\"`, `\\`, "-", "  "}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 200000 {
		var sb strings.Builder
		sb.WriteString(parts[0])
		for range 1 + rng.IntN(8) {
			sb.WriteString(parts[rng.IntN(len(parts))])
		}
		text := []byte(sb.String())
		want, got := base64Run.FindIndex(text), base64Run.FindIndex(base64Window(text))
		if !slices.Equal(want, got) {
			t.Fatalf("case %d %q: match %v in the whole text, %v in its window %q", n, text, want, got, base64Window(text))
		}
	}
}

// A base64 run's window ends where a match can't go on: at a space or tab that does
// not indent a line (it ran to the end of any text of base64 words and spaces, for
// every run: 1.4 MiB of such lines took 23 s), and goes on through indented lines.
func TestBase64WindowEndsMidLine(t *testing.T) {
	run := strings.Repeat("A", 44)
	if got := base64Window([]byte(strings.Repeat(run+" "+run+"\n", 100))); len(got) != len(run)+1 {
		t.Errorf("window of %q...: %d bytes, want %d (the run and the space)", run, len(got), len(run)+1)
	}
	wrapped := run + "\n  " + run + "\r\n\t" + run + "\n"
	if got := base64Window([]byte(wrapped + "- y")); string(got) != wrapped+"-" {
		t.Errorf("window of indented lines = %q, want them all and the next byte", got)
	}
	// Base64 after padding, a blank line, a lone \r and escapes other than \r, \n and
	// \r\n then base64 end it too: a tenant's annotation of such runs took 1.5 s a pod.
	for _, tail := range []string{"=B\n", `\t`, "\r", "\n\n", "=\n\n", "\n\r", "\r\r\n", `\n\n`, `\r\r`} {
		if got := base64Window([]byte(strings.Repeat(run+tail, 100))); len(got) > len(run)+len(tail)+1 {
			t.Errorf("window of (%q + %q) x 100: %d bytes, want at most %d", run, tail, len(got), len(run)+len(tail)+1)
		}
	}
	escaped := run + `\n` + run + `\r\n` + run
	if got := base64Window([]byte(escaped + `\"`)); string(got) != escaped+`\` {
		t.Errorf("window of runs over \\n escapes = %q, want them all and the next byte", got)
	}
}
