package install

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/myelin-net/myelin/internal/config"
)

// freeFormValues are the maps of values.yaml whose keys are the user's data (labels,
// annotations, quantities), not values of the chart: the schema types them but does
// not list their keys.
var freeFormValues = map[string]bool{
	"nodeSelector": true, "podAnnotations": true, "podLabels": true, "prometheus.serviceMonitor.labels": true,
	"resources.requests": true, "hubble.relay.resources.requests": true, "hubble.ui.resources.requests": true,
	"hubble.relay.nodeSelector": true, "hubble.ui.nodeSelector": true,
}

// optionalValues are the values the templates read as empty when they are missing
// (with, if, range, default) and that a user sets to null to drop a default
// (nodeSelector=null: every node). Every other value is required, so that values
// rendered from an older chart's defaults (helm upgrade --reuse-values keeps the
// installed chart's values.yaml, which lacks the keys added since) fail naming the
// missing key instead of rendering it as 0, "" or false.
var optionalValues = []string{
	"imagePullSecrets", "k8sServiceHost", "k8sServicePort", "clusterCIDR", "ipv4NativeRoutingCIDR", "nonMasqueradeCIDRs",
	"extraConfig", "nodeSelector", "tolerations", "podAnnotations", "podLabels", "extraEnv", "resources", "image.tag",
	"hubble.tls.secretName", "hubble.relay.resources", "hubble.ui.allowedHosts", "hubble.ui.resources",
	"hubble.metrics.enabled", "prometheus.serviceMonitor.interval", "prometheus.serviceMonitor.labels",
	"resources.requests", "hubble.relay.resources.requests", "hubble.ui.resources.requests",
	"updateStrategy.rollingUpdate", "updateStrategy.rollingUpdate.maxUnavailable",
	"hubble.relay.nodeSelector", "hubble.relay.tolerations", "hubble.relay.affinity",
	"hubble.ui.nodeSelector", "hubble.ui.tolerations", "hubble.ui.affinity",
}

// chartValue is one value of values.yaml: its dotted path and its default.
type chartValue struct {
	path string
	def  any
}

// schemaPath is the path helm's schema errors name, e.g. '/hubble/tls'.
func (v chartValue) schemaPath() string { return "/" + strings.ReplaceAll(v.path, ".", "/") }

// parent is the schema path of the object holding v, empty at the top.
func (v chartValue) parent() string {
	i := strings.LastIndex(v.path, ".")
	if i < 0 {
		return ""
	}
	return "/" + strings.ReplaceAll(v.path[:i], ".", "/")
}

// name is v's own key.
func (v chartValue) name() string { return v.path[strings.LastIndex(v.path, ".")+1:] }

// chartValues lists every value of the chart's values.yaml, objects before their
// keys, not descending into freeFormValues.
func chartValues(t *testing.T) []chartValue {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	var out []chartValue
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			path := prefix + k
			out = append(out, chartValue{path, m[k]})
			if sub, ok := m[k].(map[string]any); ok && !freeFormValues[path] {
				walk(path+".", sub)
			}
		}
	}
	walk("", root)
	return out
}

// structured says whether v is an object whose keys are the chart's.
func (v chartValue) structured() bool {
	_, isMap := v.def.(map[string]any)
	return isMap && !freeFormValues[v.path]
}

// schemaRefuses says whether helm's output has a schema error at path (e.g.
// '/hubble/tls') saying what (e.g. "additional properties") about the key name.
func schemaRefuses(out, path, what, name string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, fmt.Sprintf("at '%s': %s", path, what)) && strings.Contains(line, "'"+name+"'") {
			return true
		}
	}
	return false
}

// A misspelled key fails the install at every level of the values, naming the key
// and where it is: the top, each object of the chart's (hubble, hubble.tls, ...),
// the Kubernetes-typed ones (updateStrategy, resources), list items and extraConfig.
func TestHelmSchemaRefusesMisspelledKeysEverywhere(t *testing.T) {
	args := []string{"--set", "zzTypo=1"}
	paths := []string{""}
	for _, v := range chartValues(t) {
		if v.structured() {
			args = append(args, "--set", v.path+".zzTypo=1")
			paths = append(paths, v.schemaPath())
		}
	}
	for _, item := range []string{"tolerations[0].key", "imagePullSecrets[0].name", "extraEnv[0].name"} {
		list, _, _ := strings.Cut(item, "[")
		args = append(args, "--set", item+"=x", "--set", list+"[0].zzTypo=1")
		paths = append(paths, "/"+list+"/0")
	}
	args = append(args, "--set-string", "extraConfig.enable-hubel=true")
	out, failed := helmTemplate(t, args...)
	if !failed {
		t.Fatalf("helm template %v succeeded; want every misspelled key refused", args)
	}
	for _, p := range paths {
		if !schemaRefuses(out, p, "additional properties", "zzTypo") {
			t.Errorf("helm template with misspelled keys: no error at '%s' naming 'zzTypo'", p)
		}
	}
	if !schemaRefuses(out, "/extraConfig", "additional properties", "enable-hubel") {
		t.Errorf("helm template with extraConfig.enable-hubel: no error at '/extraConfig' naming it")
	}
	if t.Failed() {
		t.Log(out)
	}
}

// wrongTyped returns the --set arguments giving v a value of another type than its
// default's; none for an object.
func (v chartValue) wrongTyped() []string {
	switch v.def.(type) {
	case bool, float64, []any:
		return []string{"--set-string", v.path + "=zz"}
	case string:
		if v.path == "k8sServicePort" || v.path == "networkPolicy.ctPodMax" || v.path == "natPodMax" || v.path == "loadBalancer.ctPodMax" { // a string or a number
			return []string{"--set", v.path + "=true"}
		}
		return []string{"--set", v.path + "=12345"}
	}
	return nil
}

// Every value of values.yaml with a value of the wrong type fails the install, naming
// the value.
func TestHelmSchemaRefusesWrongTypesEverywhere(t *testing.T) {
	var args, want []string
	for _, v := range chartValues(t) {
		if a := v.wrongTyped(); a != nil {
			args = append(args, a...)
			want = append(want, fmt.Sprintf("at '%s': ", v.schemaPath()))
		}
	}
	if len(want) < 50 {
		t.Fatalf("only %d values of values.yaml typed wrong: %v", len(want), args)
	}
	out, failed := helmTemplate(t, args...)
	if !failed {
		t.Fatalf("helm template %v succeeded; want every wrong type refused", args)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("helm template with wrong types: no error %q...", w)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// Each value not in optionalValues is required: missing (as after helm upgrade
// --reuse-values from a chart that did not have it, or set to null) it fails the
// install naming it; the optional ones all missing at once still render.
func TestHelmSchemaRequiresWhatTheTemplatesRead(t *testing.T) {
	helm(t) // skips here, not in a goroutine, without helm
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, v := range chartValues(t) {
		if slices.Contains(optionalValues, v.path) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, failed := helmTemplate(t, "--set", v.path+"=null")
			if !failed || !schemaRefuses(out, v.parent(), "missing propert", v.name()) {
				t.Errorf("helm template --set %s=null: failed %v, output %.300q; want an error at '%s' naming '%s' missing",
					v.path, failed, out, v.parent(), v.name())
			}
		}()
	}
	wg.Wait()
	var args []string
	for _, p := range optionalValues {
		if i := strings.LastIndex(p, "."); i < 0 || !slices.Contains(optionalValues, p[:i]) { // its parent goes with it
			args = append(args, "--set", p+"=null")
		}
	}
	args = append(args, "--set", "hubble.relay.enabled=true", "--set", "hubble.ui.enabled=true", "--set", "prometheus.serviceMonitor.enabled=true")
	if out, failed := helmTemplate(t, args...); failed {
		t.Errorf("helm template with every optional value missing: %s", out)
	}
}

// helm upgrade --reuse-values renders the new chart with the installed chart's
// values.yaml: values added since are missing. Two that used to render silently wrong
// (node health probing off, no hostPort plugin) now fail, naming themselves.
func TestHelmReuseValuesFromAnOlderChartFailsNamingTheMissingValues(t *testing.T) {
	chart := t.TempDir()
	if err := os.CopyFS(chart, os.DirFS(chartDir())); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(chart, "values.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := string(b)
	for _, line := range []string{"\nclusterHealthPort: 4240\n", "\n  hostPort: true\n"} {
		if !strings.Contains(old, line) {
			t.Fatalf("values.yaml has no line %q: this test removes it", strings.TrimSpace(line))
		}
		old = strings.Replace(old, line, "\n", 1)
	}
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, nil, helm(t), "template", "myelin", chart, "--namespace", "kube-system")
	for _, w := range []string{"at '': missing property 'clusterHealthPort'", "at '/cni': missing property 'hostPort'"} {
		if err == nil || !strings.Contains(out, w) {
			t.Errorf("the chart rendered with values.yaml lacking clusterHealthPort and cni.hostPort: err %v; want a failure saying %q\n%s", err, w, out)
		}
	}
}

// extraConfig accepts exactly the agent's configuration keys, so a misspelled one
// fails at install, not at the agent's start on the first node of the rollout; of
// those, a key a value renders fails naming that value (TestChartExtraConfigRefusesTypedKeys),
// and the others (memory-limit) render.
func TestHelmSchemaExtraConfigIsTheAgentsKeys(t *testing.T) {
	var schema struct {
		Properties struct {
			ExtraConfig struct {
				AdditionalProperties *bool          `json:"additionalProperties"`
				Properties           map[string]any `json:"properties"`
			} `json:"extraConfig"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	ec := schema.Properties.ExtraConfig
	if ec.AdditionalProperties == nil || *ec.AdditionalProperties {
		t.Fatalf("values.schema.json extraConfig allows any key; want additionalProperties false")
	}
	all, err := config.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	var keys, untyped []string
	typed := typedKeys(t)
	for _, e := range all.Effective {
		keys = append(keys, e.Key)
		if _, ok := typed[e.Key]; !ok {
			untyped = append(untyped, e.Key)
		}
	}
	if got := slices.Sorted(maps.Keys(ec.Properties)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Errorf("values.schema.json extraConfig lists %v; the agent's keys are %v", got, keys)
	}
	if len(untyped) == 0 {
		t.Fatal("every configuration key has a value: nothing for extraConfig to render")
	}
	for _, k := range untyped {
		cm := find(t, objects(t, template(t, "extraConfig."+k+"=x")), "ConfigMap", config.ConfigMapName)
		if data, _, _ := unstructured.NestedStringMap(cm.Object, "data"); data[k] != "x" {
			t.Errorf("extraConfig.%s=x renders %s: %q", k, k, data[k])
		}
	}
}

// typedKeys reads myelin.typedKeys from the chart: the configuration keys the values
// render, with the value that renders each.
func typedKeys(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "templates", "_config.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(b), `{{- define "myelin.typedKeys" -}}`)
	body, _, ok2 := strings.Cut(body, "{{- end -}}")
	if !ok || !ok2 {
		t.Fatal(`_config.tpl defines no myelin.typedKeys`)
	}
	var m map[string]string
	if err := yaml.Unmarshal([]byte(body), &m); err != nil || len(m) < 20 {
		t.Fatalf("parse myelin.typedKeys: %v (%d keys)", err, len(m))
	}
	return m
}

// Values that would change the manifests' YAML (a " #" starts a comment, ": " a map),
// break a Kubernetes name or label, or run two agents on one node fail the install,
// naming the value: the rendered objects are always the ones the values say.
func TestHelmRefusesValuesThatBreakTheManifests(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"uplink=eth0 #x", "at '/uplink'"},
		{"cni.binPath=/opt/cni bin", "at '/cni/binPath'"},
		{"bpf.root=/sys/fs/bpf #x", "at '/bpf/root'"},
		{"hubble.ui.allowedHosts[0]=a: b", "at '/hubble/ui/allowedHosts/0'"},
		{"hubble.tls.serverName=h #c", "at '/hubble/tls/serverName'"},
		{"hubble.tls.secretName=Hubble TLS", "at '/hubble/tls/secretName'"},
		{"image.tag=v1+build", "at '/image/tag'"},
		{"updateStrategy.rollingUpdate.maxSurge=1", "at '/updateStrategy/rollingUpdate/maxSurge'"},
		{"podLabels.k8s-app=x", "podLabels.k8s-app: the chart sets this label itself"},
		{"podLabels.app\\.kubernetes\\.io/name=x", "podLabels.app.kubernetes.io/name: the chart sets this label itself"},
	} {
		if out, failed := helmTemplate(t, "--set-string", c.set); !failed || !strings.Contains(out, c.want) {
			t.Errorf("helm template --set-string %s: failed %v, output %.300q; want a failure saying %q", c.set, failed, out, c.want)
		}
	}
	if got := daemonSet(t, "updateStrategy.type=OnDelete").Spec.UpdateStrategy.Type; got != "OnDelete" {
		t.Errorf("updateStrategy.type=OnDelete renders %s", got)
	}
	if got := daemonSet(t, "podLabels.team=net").Spec.Template.Labels["team"]; got != "net" {
		t.Errorf("podLabels.team=net renders team=%q on the agent pods", got)
	}
}

// Every integer the schema admits for a value that renders a configuration key is one
// the agent accepts: else helm install passes and the first agent of the rollout
// stops on its configuration. Checked at each bound of the schema and one past it
// (an mtu of 1279, a NodePort table of 15 entries): where the schema admits the
// value, the rendered myelin-config must resolve.
func TestHelmSchemaIntegerBoundsAreTheAgents(t *testing.T) {
	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for key, path := range typedKeys(t) {
		prop := schema
		for _, name := range strings.Split(path, ".") {
			props, _ := prop["properties"].(map[string]any)
			prop, _ = props[name].(map[string]any)
		}
		branches := []any{prop}
		if anyOf, ok := prop["anyOf"].([]any); ok {
			branches = anyOf
		}
		var candidates []int64
		for _, br := range branches {
			br, _ := br.(map[string]any)
			if br["type"] != "integer" {
				continue
			}
			for _, bound := range []string{"minimum", "maximum", "const"} {
				if v, ok := br[bound].(float64); ok {
					candidates = append(candidates, int64(v)-1, int64(v), int64(v)+1)
				}
			}
		}
		for _, v := range candidates {
			set := fmt.Sprintf("%s=%d", path, v)
			out, failed := helmTemplate(t, "--set", set)
			if failed {
				continue // the schema refuses it
			}
			checked++
			cm := find(t, objects(t, out), "ConfigMap", config.ConfigMapName)
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			if _, err := config.Resolve(config.Source{Name: "chart", Values: data}); err != nil {
				t.Errorf("the schema admits --set %s but the agent refuses %s: %v", set, key, err)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d integer values checked at the schema's bounds; want the ports, sizes and mtu", checked)
	}
}

// maglev.tableSize must be a prime, which the schema cannot say: the chart fails
// the install on a composite size, naming a divisor, exactly where the agent would
// refuse it.
func TestHelmRefusesACompositeMaglevTableSize(t *testing.T) {
	for _, n := range []int{251, 252, 253, 257, 361, 16381, 16383, 65521, 65535, 131071} {
		out, failed := helmTemplate(t, "--set", fmt.Sprintf("maglev.tableSize=%d", n))
		_, err := config.Resolve(config.Source{Name: "test", Values: map[string]string{"maglev-table-size": fmt.Sprint(n)}})
		if failed != (err != nil) {
			t.Errorf("maglev.tableSize=%d: helm template failed=%v, the agent's error %v; want both to refuse it or both to take it\n%s", n, failed, err, out)
		}
		if failed && !strings.Contains(out, fmt.Sprintf("maglev.tableSize %d is not a prime", n)) {
			t.Errorf("maglev.tableSize=%d: helm's error does not name the value:\n%s", n, out)
		}
	}
}

// runPath must be a directory of the agent's own (cleanup empties it: /run would take
// the node's containerd and kubelet files with it), and hubble.listenAddress a port
// the agent can listen on: both fail at install, naming the value.
func TestHelmSchemaRefusesSharedRunPathAndBadPorts(t *testing.T) {
	for _, tc := range []struct {
		set, path string
		refused   bool
	}{
		{"runPath=/run", "/runPath", true},
		{"runPath=/", "/runPath", true},
		{"runPath=/run/myelin/", "/runPath", true},
		{"runPath=/var/lib/kubelet", "/runPath", true},
		{"runPath=/run/myelin", "/runPath", false},
		{"runPath=/var/run/myelin-state", "/runPath", false},
		{"hubble.listenAddress=:0", "/hubble/listenAddress", true},
		{"hubble.listenAddress=:99999", "/hubble/listenAddress", true},
		{"hubble.listenAddress=:65535", "/hubble/listenAddress", false},
		{"hubble.listenAddress=0.0.0.0:4244", "/hubble/listenAddress", false},
	} {
		out, failed := helmTemplate(t, "--set", tc.set)
		value := tc.set[strings.Index(tc.set, "=")+1:]
		refused := failed && strings.Contains(out, fmt.Sprintf("at '%s': '%s' does not match pattern", tc.path, value))
		if refused != tc.refused {
			t.Errorf("helm template --set %s: refused %v, want %v\n%s", tc.set, refused, tc.refused, out)
		}
	}
}

// An image name without a registry host is never pulled (containerd would fetch it from
// Docker Hub, where anyone may hold the name): the default is Never, and asking to pull
// such a name fails the install naming it; a registry's name may be pulled.
func TestChartRefusesPullingUnqualifiedImages(t *testing.T) {
	out, failed := helmTemplate(t, "--set", "image.pullPolicy=IfNotPresent")
	if !failed || !strings.Contains(out, `image.repository "myelin/agent" names no registry host`) {
		t.Errorf("pullPolicy IfNotPresent with myelin/agent: failed %v\n%s\nwant a refusal naming the repository", failed, out)
	}
	for _, repo := range []string{"localhost:5000/myelin/agent", "registry.internal/myelin/agent"} {
		if out, failed := helmTemplate(t, "--set", "image.pullPolicy=IfNotPresent", "--set", "image.repository="+repo); failed {
			t.Errorf("pullPolicy IfNotPresent with %s: %s", repo, out)
		}
	}
}
