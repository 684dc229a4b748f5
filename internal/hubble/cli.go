package hubble

import (
	"os/exec"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// CLIVersion is the hubble CLI release scripts/versions.sh pins (HUBBLE_VERSION; a test
// checks they agree): the Hubble API's acceptance client, built by scripts/build-hubble.sh.
const CLIVersion = "v1.18.4"

// CLIBin is the pinned hubble in the tool cache, else a hubble on PATH; "" when neither
// exists (run make setup).
func CLIBin() string {
	p := filepath.Join(cni.ToolCache(), "hubble", CLIVersion, "bin", "hubble")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("hubble"); err == nil {
		return p
	}
	return ""
}
