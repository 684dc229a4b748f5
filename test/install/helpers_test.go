package install

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/myelin-net/myelin/internal/testenv"
)

// repoRoot is the repository's top directory (this file is test/install/).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func chartDir() string { return filepath.Join(repoRoot(), "install", "helm", "myelin") }

// helm is the pinned helm; without it the test skips (fails with CI=true).
func helm(t *testing.T) string { return testenv.Helm(t) }

// run runs a command and returns its combined output.
func run(t *testing.T, stdin []byte, name string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), err
}

// template renders the chart as release myelin in kube-system with the given --set
// values and fails the test on an error.
func template(t *testing.T, sets ...string) string {
	t.Helper()
	var args []string
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, failed := helmTemplate(t, args...)
	if failed {
		t.Fatalf("helm template %s: failed\n%s", strings.Join(args, " "), out)
	}
	return out
}

// helmTemplate runs helm template (release myelin in kube-system) with args after the
// chart and returns its output and whether it failed.
func helmTemplate(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	out, err := run(t, nil, helm(t), append([]string{"template", "myelin", chartDir(), "--namespace", "kube-system"}, args...)...)
	return out, err != nil
}

// objects parses a multi-document YAML stream.
func objects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := yamlutil.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("parse rendered manifest: %v", err)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// find returns the rendered object of kind and name.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil
}

// versionsPin reads NAME=value from scripts/versions.sh.
func versionsPin(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "scripts", "versions.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("scripts/versions.sh pins no %s", name)
	}
	return string(m[1])
}

// notes renders the chart's NOTES.txt (what helm install prints) with the given --set
// values: helm template leaves NOTES out and helm install needs a cluster, so a copy of
// the chart carries NOTES.txt as a named template that a ConfigMap renders.
func notes(t *testing.T, sets ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "myelin")
	if out, err := run(t, nil, "cp", "-r", chartDir(), dir); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	text, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"_notes_test.tpl": `{{- define "notes.test" -}}` + string(text) + `{{- end -}}`,
		"notes-test.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include \"notes.test\" . | quote }}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "templates", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"template", "myelin", dir, "--namespace", "kube-system", "--show-only", "templates/notes-test.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := run(t, nil, helm(t), args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	v, _, _ := unstructured.NestedString(find(t, objects(t, out), "ConfigMap", "notes").Object, "data", "notes")
	return v
}
