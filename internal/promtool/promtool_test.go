package promtool

import (
	"os"
	"regexp"
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

func TestVersionMatchesScript(t *testing.T) {
	b, err := os.ReadFile("../../scripts/build-promtool.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMETHEUS_MODULE_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Errorf("scripts/build-promtool.sh pins %q, internal/promtool %s: keep them equal", m, Version)
	}
}

// The pinned promtool accepts a good scrape and names what is wrong in a bad one
// (a counter without _total, no HELP).
func TestCheckMetrics(t *testing.T) {
	bin := Bin()
	if bin == "" {
		testenv.Skipf(t, "needs promtool %s (make setup builds it into %s)", Version, BinDir())
	}
	good := "# HELP myelin_x_total Things.\n# TYPE myelin_x_total counter\nmyelin_x_total 1\n"
	if err := CheckMetrics(bin, []byte(good)); err != nil {
		t.Errorf("good scrape: %v", err)
	}
	bad := "# TYPE myelin_x counter\nmyelin_x 1\n"
	if err := CheckMetrics(bin, []byte(bad)); err == nil {
		t.Error("a counter without _total and HELP passed promtool check metrics")
	}
}
