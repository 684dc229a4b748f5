package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/bench"
	"github.com/myelin-net/myelin/internal/netns"
)

// TestBenchQuickReport runs `myelin bench --quick` on the no-lab quick cases as a user
// would and checks that it writes a complete report: report.md, results.json with a run
// of every one of those cases, and the charts; and that it leaves no namespace behind.
// (The full --quick set builds a lab per stage, minutes make test does not spend.) It asserts no speed:
// the bench is evidence, not a test.
func TestBenchQuickReport(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	out, err := myelin("bench", "--quick", "--cases", strings.Join(bench.QuickNoLabCases, ","), "--out", dir)
	t.Log(out)
	if err != nil {
		t.Fatalf("myelin bench --quick: %v", err)
	}
	for _, f := range []string{bench.ReportMarkdown, bench.ReportJSON} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written (%v)", f, err)
		}
	}
	if charts, _ := filepath.Glob(filepath.Join(dir, "*.svg")); len(charts) == 0 {
		t.Errorf("no charts (*.svg) in %s", dir)
	}

	b, err := os.ReadFile(filepath.Join(dir, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	ran := map[string]bool{}
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Errorf("%s failed: %s", r.Case, r.Error)
		}
		ran[r.Case] = true
	}
	quick, err := bench.Select(bench.Catalog(bench.ProductPrefix), bench.QuickNoLabCases)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range quick {
		if !ran[c.Name] {
			t.Errorf("results.json has no run of quick case %s", c.Name)
		}
	}
	for _, c := range res.Cases {
		if c.Unavailable != "" {
			t.Errorf("%s not available: %s", c.Name, c.Unavailable)
		}
	}
	if left := netns.Named(bench.ProductPrefix); len(left) > 0 {
		t.Errorf("namespaces left behind by the bench: %v", left)
	}
}
