package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/version"
)

// Packages whose presence makes the linker keep every exported method of every type:
// a template looks methods up by name at run time (text/template), and gRPC's tracing
// is what links it (version.BuildTags).
var methodKeepers = []string{"text/template", "html/template", "golang.org/x/net/trace"}

// TestAgentLinksNoMethodKeepers guards the agent binary's size, and so its resident
// memory: built with the release build tags it must not link a package that turns off
// the linker's dead-method elimination.
func TestAgentLinksNoMethodKeepers(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", version.BuildTags, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, p := range methodKeepers {
		if slices.Contains(deps, p) {
			t.Errorf("myelin-agent links %s: every exported method of every type stays in the binary (find the importer with go list -deps -f '{{.ImportPath}}: {{.Imports}}')", p)
		}
	}
	for _, p := range fullScheme {
		if slices.Contains(deps, p) {
			t.Errorf("myelin-agent links %s, which registers every Kubernetes API group: use internal/kube", p)
		}
	}
	for _, d := range deps {
		for _, p := range cliOnly {
			if d == p || strings.HasPrefix(d, p+"/") {
				t.Errorf("myelin-agent links %s, code of the myelin command: move what the agent needs out of it", d)
			}
		}
	}
}

// client-go's typed clientset, its scheme of every API group and the informer factory
// over it: ~10 MiB of resident memory the agent does without (internal/kube).
var fullScheme = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/kubernetes/scheme",
	"k8s.io/client-go/informers",
	"github.com/myelin-net/myelin/internal/kube/kubefake",
}

// The myelin command's packages (lab, bench, service map, CLI views): the agent has no
// use for them, and every package it links costs it resident memory.
var cliOnly = []string{
	"github.com/myelin-net/myelin/internal/lab",
	"github.com/myelin-net/myelin/internal/labdriver",
	"github.com/myelin-net/myelin/internal/bench",
	"github.com/myelin-net/myelin/internal/ui",
	"github.com/myelin-net/myelin/internal/cli",
}

// TestMakefileBuildTags keeps the Makefile's GOTAGS and version.BuildTags equal.
func TestMakefileBuildTags(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GOTAGS\s*:=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no GOTAGS := line")
	}
	if got := strings.TrimSpace(string(m[1])); got != version.BuildTags {
		t.Errorf("Makefile GOTAGS = %q, internal/version.BuildTags = %q: keep them equal", got, version.BuildTags)
	}
	if !strings.Contains(string(mk), "-tags $(GOTAGS)") {
		t.Error("make build does not pass -tags $(GOTAGS)")
	}
}
