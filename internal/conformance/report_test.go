package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A ginkgo JSON report as e2e.test writes it: a suite node, a passed, a failed, a
// skipped-at-run-time and a filtered-out spec.
const sample = `[{"SuiteDescription":"Kubernetes e2e suite","SpecReports":[
{"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"},
{"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeText":"should serve a basic endpoint from pods","LeafNodeLabels":["Conformance"],"LeafNodeType":"It","State":"passed","RunTime":12000000000},
{"ContainerHierarchyTexts":["[sig-network] DNS"],"LeafNodeText":"should provide DNS for services","LeafNodeLabels":["Conformance"],"LeafNodeType":"It","State":"failed","Failure":{"Message":"timed out waiting for the condition\nmore"}},
{"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeText":"should work on GCE","LeafNodeType":"It","State":"skipped","Failure":{"Message":"Only supported for providers [gce] (not skeleton)"}},
{"ContainerHierarchyTexts":["[sig-storage] CSI"],"LeafNodeText":"mounts","LeafNodeType":"It","State":"skipped"}
]}]`

func TestReadReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Summary(); got != "1/3 passed (1 failed, 1 skipped)" {
		t.Errorf("summary %q, want 1/3 passed (1 failed, 1 skipped): the filtered-out spec and the suite node don't count", got)
	}
	d := res.Details()
	for _, want := range []string{
		"- failed: [sig-network] DNS should provide DNS for services [Conformance] — timed out waiting for the condition\n",
		"- skipped: [sig-network] Services should work on GCE — Only supported for providers [gce] (not skeleton)\n",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "basic endpoint") || strings.Contains(d, "more") {
		t.Errorf("details list a passed spec or a failure's later lines:\n%s", d)
	}
}

func TestReadReportBad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	_ = os.WriteFile(path, []byte("{not json"), 0o644)
	if _, err := ReadReport(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad report: %v, want an error naming %s", err, path)
	}
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	s := Suite{Binary: filepath.Join(dir, "e2e.test")}
	if err := s.Check(dir); err == nil || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("missing e2e.test: %v, want the path and make setup", err)
	}
	_ = os.WriteFile(s.Binary, nil, 0o755)
	if err := s.Check(dir); err == nil || !strings.Contains(err.Error(), "myelin.invalid/e2e/agnhost:2.56") || !strings.Contains(err.Error(), "images build --e2e") {
		t.Errorf("missing image archive: %v, want the image and how to build it", err)
	}
}
