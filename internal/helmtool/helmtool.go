// Package helmtool finds the pinned Helm that scripts/build-helm.sh builds into the
// tool cache, for the chart's tests and the e2e tests that install the chart.
package helmtool

import (
	"os/exec"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// Version is the Helm release scripts/versions.sh pins (a test checks they agree).
const Version = "v3.19.0"

// BinDir is where scripts/build-helm.sh puts helm (scripts/versions.sh's cache rule).
func BinDir() string { return filepath.Join(cni.ToolCache(), "helm", Version, "bin") }

// Bin is the pinned helm in the tool cache, else a helm on PATH; "" when neither
// exists (run make setup).
func Bin() string {
	p := filepath.Join(BinDir(), "helm")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	return ""
}
