package sysdump

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
)

func obj(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns,
			"annotations": map[string]any{
				lastApplied: `{"apiVersion":"v1","kind":"Pod","stringData":{"x":"y"},"data":{\"password\":\"hunter3\"}}`,
				"note":      "kept-annotation"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "fieldsV1": map[string]any{"f:env": "hunter5"}}}},
		"spec": spec,
	}}
}

func container(name string, env ...any) map[string]any {
	return map[string]any{"name": name, "image": "img", "env": env}
}

func envVar(name, value string) map[string]any { return map[string]any{"name": name, "value": value} }

// The cluster files hold no env value, last-applied configuration or managedFields of
// any container kind, in Pods and DaemonSets; names and valueFrom references stay.
func TestClusterObjectsScrubbed(t *testing.T) {
	fromSecret := map[string]any{"name": "DB_URL", "valueFrom": map[string]any{
		"secretKeyRef": map[string]any{"name": "db", "key": "url"}}}
	pod := obj("v1", "Pod", "default", "web", map[string]any{
		"containers":          []any{container("app", envVar("DB_PASS", "hunter2"), envVar("API_TOKEN", "abc"), envVar("GREETING", "plain-hello"), fromSecret)},
		"initContainers":      []any{container("init", envVar("SEED", "init-value-1"))},
		"ephemeralContainers": []any{container("debug", envVar("X", "ephemeral-value-1"))},
	})
	ds := obj("apps/v1", "DaemonSet", "kube-system", "agent", map[string]any{
		"template": map[string]any{"spec": map[string]any{
			"containers": []any{container("agent", envVar("LICENSE", "ds-value-1"))}}}})
	files := dumpOf(t, pod, ds)
	var pods, dss string
	for name, body := range files {
		switch {
		case strings.HasSuffix(name, "/cluster/pods.json"):
			pods = body
		case strings.HasSuffix(name, "/cluster/daemonsets.json"):
			dss = body
		}
		for _, secret := range []string{"hunter2", `"abc"`, "hunter3", "hunter5", "plain-hello", "init-value-1", "ephemeral-value-1", "ds-value-1", lastApplied, "managedFields"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s holds %q:\n%s", name, secret, body)
			}
		}
	}
	for _, kept := range []string{"DB_PASS", "GREETING", "SEED", "secretKeyRef", "kept-annotation"} {
		if !strings.Contains(pods, kept) {
			t.Errorf("pods.json lost %q:\n%s", kept, pods)
		}
	}
	if !strings.Contains(dss, "LICENSE") {
		t.Errorf("daemonsets.json lost the env name:\n%s", dss)
	}
}

// A pod template's own last-applied annotation goes too, and a Secret embedded in any
// annotation (here the chart's hubble-tls, as a tool copied it) leaves no key material.
func TestClusterObjectsScrubbedAnnotations(t *testing.T) {
	h := newHubbleTLS(t)
	key := b64(h.key)
	ds := obj("apps/v1", "DaemonSet", "kube-system", "myelin", map[string]any{
		"template": map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{
				lastApplied:       `{"spec":{"containers":[{"env":[{"name":"MY_API_TOKEN","value":"template-value-1"}]}]}}`,
				"checksum/config": "f4a0700cf3e2",
			}},
			"spec": map[string]any{"containers": []any{container("agent", envVar("MY_API_TOKEN", "tok123"))}},
		}})
	pod := obj("v1", "Pod", "kube-system", "hubble-relay-1", map[string]any{"containers": []any{container("hubble-relay")}})
	unstructured.SetNestedField(pod.Object, h.secretJSON, "metadata", "annotations", "example.com/copied-from")
	var dss, pods string
	for name, body := range dumpOf(t, pod, ds) {
		for _, secret := range []string{"template-value-1", "tok123", key[40:80], lastApplied} {
			if strings.Contains(body, secret) {
				t.Errorf("%s holds %q:\n%s", name, secret, body)
			}
		}
		switch {
		case strings.HasSuffix(name, "/cluster/daemonsets.json"):
			dss = body
		case strings.HasSuffix(name, "/cluster/pods.json"):
			pods = body
		}
	}
	if !strings.Contains(dss, "checksum/config") {
		t.Errorf("daemonsets.json lost the template's other annotations:\n%s", dss)
	}
	if !strings.Contains(pods, "example.com/copied-from") {
		t.Errorf("pods.json lost the annotation's name:\n%s", pods)
	}
}

// Tenants' command lines, lifecycle hooks and probe header values go (passwords in
// forms no pattern knows), as do annotations holding a JSON object (a tool's copy of
// the whole object, env values and all); kube-system's and myelin's own workloads
// keep their command lines.
func TestClusterObjectsScrubbedCommandLines(t *testing.T) {
	app := container("redis")
	app["command"] = []any{"redis-server", "--requirepass", "cmd-secret-1"}
	app["args"] = []any{"--masterauth=cmd-secret-2", "-pcmd-secret-3", "app:cmd-secret-4@tcp(db)/app"}
	app["lifecycle"] = map[string]any{"preStop": map[string]any{"exec": map[string]any{"command": []any{"sh", "-c", "cmd-secret-5"}}}}
	app["readinessProbe"] = map[string]any{"httpGet": map[string]any{"path": "/ready", "httpHeaders": []any{
		map[string]any{"name": "X-Probe-Key", "value": "cmd-secret-6"}}}}
	app["livenessProbe"] = map[string]any{"exec": map[string]any{"command": []any{"redis-cli", "-a", "cmd-secret-8", "ping"}},
		"periodSeconds": int64(7)}
	pod := obj("v1", "Pod", "default", "redis", map[string]any{"containers": []any{app}})
	unstructured.SetNestedField(pod.Object, `{"spec":{"containers":[{"env":[{"name":"SIGNING_SEED","value":"cmd-secret-7"}]}]}}`,
		"metadata", "annotations", "kapp.k14s.io/original")
	agent := container("agent")
	agent["args"] = []any{"--state-dir=/run/myelin"}
	ds := obj("apps/v1", "DaemonSet", "kube-system", "kube-proxy", map[string]any{
		"template": map[string]any{"spec": map[string]any{"containers": []any{agent}}}})
	relay := container("relay")
	relay["args"] = []any{"--peer-port=4244"}
	myelinPod := obj("v1", "Pod", "observability", "myelin-relay-x", map[string]any{"containers": []any{relay}})
	unstructured.SetNestedField(myelinPod.Object, "myelin", "metadata", "labels", "app.kubernetes.io/name")
	var pods, dss string
	for name, body := range dumpOf(t, pod, ds, myelinPod) {
		for i := 1; i <= 8; i++ {
			if secret := fmt.Sprintf("cmd-secret-%d", i); strings.Contains(body, secret) {
				t.Errorf("%s holds %q:\n%s", name, secret, body)
			}
		}
		switch {
		case strings.HasSuffix(name, "/cluster/pods.json"):
			pods = body
		case strings.HasSuffix(name, "/cluster/daemonsets.json"):
			dss = body
		}
	}
	for _, kept := range []string{"X-Probe-Key", "/ready", "periodSeconds", "kapp.k14s.io/original", droppedJSON, "--peer-port=4244"} {
		if !strings.Contains(pods, kept) {
			t.Errorf("pods.json lost %q:\n%s", kept, pods)
		}
	}
	if !strings.Contains(dss, "--state-dir=/run/myelin") {
		t.Errorf("daemonsets.json lost kube-system's args:\n%s", dss)
	}
}

// dumpOf runs sysdump against a fake cluster holding objs and returns the archive's
// files by name.
func dumpOf(t *testing.T, objs ...runtime.Object) map[string]string {
	t.Helper()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), ListKinds(), objs...)
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Dynamic: dyn, Output: out}); err != nil {
		t.Fatal(err)
	}
	return readArchive(t, out)
}
