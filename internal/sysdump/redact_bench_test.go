package sysdump

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchInput is about size bytes of what a dump holds, mixed: the agent's JSON and
// text logs, kubelet-style log lines, route tables, indented cluster objects (with
// a last-applied annotation and a base64 certificate) and YAML configuration, with
// a secret now and then.
func benchInput(tb testing.TB, size int) []byte {
	tb.Helper()
	h := newHubbleTLS(tb)
	pod, err := json.MarshalIndent(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "web-7d9f", "namespace": "default", "uid": "0b9e4c1a-5c1e-4f3b-9d7a-2f1e6c3b8a90",
			"annotations": map[string]string{lastApplied: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}`}},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "nginx:1.27",
			"args": []string{"--port=8080", "--log-level=info"}, "env": []any{map[string]string{"name": "MODE", "value": "fast"}}}},
			"nodeName": "n1", "serviceAccountName": "default"},
		"status": map[string]any{"podIP": "10.244.1.7", "phase": "Running"},
	}, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	parts := []string{
		`{"time":"2026-12-01T12:00:00.123Z","level":"INFO","msg":"endpoint synced","node":"n1","endpoint":"default/web-7d9f","ip":"10.244.1.7","ifindex":12}` + "\n",
		`{"time":"2026-12-01T12:00:00.124Z","level":"DEBUG","msg":"service programmed","service":"default/kubernetes","frontend":"10.96.0.1:443","backends":3,"revision":42}` + "\n",
		`time=2026-12-01T12:00:01.000Z level=INFO msg="policy applied" node=n1 endpoint=default/web-7d9f ingress=3 egress=1 duration=1.2ms` + "\n",
		`I1201 12:00:02.000000    1234 reflector.go:351] Listing and watching *v1.Pod from pkg/mod/k8s.io/client-go/tools/cache/reflector.go:229` + "\n",
		"10.244.1.0/24 via 10.0.0.3 dev eth0 proto static\n10.244.2.7 dev lxc12ab34cd scope link\n",
		string(pod) + "\n",
		"mode: native\nhostRouting: bpf\nipam:\n  podCIDR: 10.244.1.0/24\nhubble:\n  enabled: true\n  tlsKeyFile: /etc/myelin/hubble-tls/tls.key\n",
		`{"kind":"ConfigMap","data":{"ca.crt":"` + b64(h.ca) + `"}}` + "\n",
		`time=2026-12-01T12:00:03.000Z level=WARN msg="retry" headers="Authorization: Bearer s3cr3tv4lue" password=hunter2` + "\n",
	}
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		b.WriteString(parts[i%len(parts)])
		fmt.Fprintf(&b, "conntrack entry %d: 10.244.1.%d:%d -> 10.96.0.10:53 udp\n", i, i%250, 30000+i%30000)
	}
	return []byte(b.String())
}

// BenchmarkRedact reports what Redact costs per MiB of a mixed dump (ns/op is per
// MiB).
func BenchmarkRedact(b *testing.B) {
	in := benchInput(b, 1<<20)
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		Redact(in)
	}
}
