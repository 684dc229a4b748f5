package install

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/myelin-net/myelin/internal/sysdump"
)

// What `myelin sysdump` collects from an install of the chart with Hubble TLS, the
// relay, the UI, extraConfig and an extraEnv token, its objects as `helm template |
// kubectl apply` leaves them (with the last-applied annotation) plus an agent Pod of
// the DaemonSet: no env value and no copy of the objects, but what a report needs
// (the TLS Secret's name and files, the configuration keys, the env names) stays.
func TestChartSysdump(t *testing.T) {
	const token = "tok-from-extraEnv-7"
	objs := objects(t, template(t, "hubble.tls.enabled=true", "hubble.tls.secretName=hubble-tls",
		"hubble.relay.enabled=true", "hubble.ui.enabled=true", "extraConfig.memory-limit=512Mi",
		"k8sServiceHost=10.0.0.1", "k8sServicePort=6443",
		"extraEnv[0].name=MY_API_TOKEN", "extraEnv[0].value="+token))
	var cluster []runtime.Object
	for _, o := range objs {
		applied, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		o.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(applied)})
		cluster = append(cluster, o)
	}
	ds := find(t, objs, "DaemonSet", "myelin")
	spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	spec["nodeName"] = "n1"
	cluster = append(cluster, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "myelin-x7k2p", "namespace": "kube-system", "labels": map[string]any{"app.kubernetes.io/name": "myelin"}},
		"spec":     spec,
	}})
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	err := sysdump.Run(context.Background(), &log, sysdump.Options{Dynamic: dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), sysdump.ListKinds(), cluster...), Output: out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := sysdump.ReadArchive(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		files[e.Name[strings.Index(e.Name, "/")+1:]] = string(e.Data)
		for _, leak := range []string{token, "last-applied-configuration"} {
			if strings.Contains(string(e.Data), leak) {
				t.Errorf("%s holds %q", e.Name, leak)
			}
		}
	}
	for file, kept := range map[string][]string{
		"cluster/daemonsets.json":    {`"secretName": "hubble-tls"`, `"name": "MY_API_TOKEN"`, `"--state-dir=/run/myelin"`},
		"cluster/pods.json":          {`"secretName": "hubble-tls"`, `"name": "MY_API_TOKEN"`, `"mountPath": "/etc/myelin/hubble-tls"`},
		"cluster/myelin-config.json": {`"hubble-tls-key-file": "/etc/myelin/hubble-tls/tls.key"`, `"memory-limit": "512Mi"`, `"hubble-listen-address": ":4244"`},
	} {
		for _, k := range kept {
			if !strings.Contains(files[file], k) {
				t.Errorf("%s lost %s:\n%s", file, k, files[file])
			}
		}
	}
}
