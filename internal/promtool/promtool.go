// Package promtool finds the pinned promtool that scripts/build-promtool.sh builds
// from the Prometheus Go module into the tool cache, and runs its `check metrics`
// (Prometheus' own linter) on a scrape: the e2e tests' scraper check of the metric
// endpoints.
package promtool

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// Version is the Prometheus Go module version scripts/build-promtool.sh pins
// (PROMETHEUS_MODULE_VERSION; a test checks they agree). Its v0.X.Y tags are
// Prometheus v3.X.Y.
const Version = "v0.307.3"

// BinDir is where scripts/build-promtool.sh puts promtool.
func BinDir() string { return filepath.Join(cni.ToolCache(), "prometheus", Version, "bin") }

// Bin is the pinned promtool, else one on PATH; "" when neither exists (run make setup).
func Bin() string {
	p := filepath.Join(BinDir(), "promtool")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	return ""
}

// CheckMetrics runs `promtool check metrics` on a scrape in the text exposition
// format; the error carries promtool's findings.
func CheckMetrics(bin string, scrape []byte) error {
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool check metrics: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
