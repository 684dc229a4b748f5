// Package hubbletool finds the pinned hubble CLI that scripts/build-hubble.sh builds
// into the tool cache: the Hubble API's acceptance client, for the relay's and the e2e
// tests. It is apart from internal/hubble so the agent, which serves that API, does not
// link the lab's tool-cache code.
package hubbletool

import (
	"os/exec"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/cni"
)

// Version is the hubble CLI release scripts/versions.sh pins (HUBBLE_VERSION; a test
// checks they agree).
const Version = "v1.18.4"

// Bin is the pinned hubble in the tool cache, else a hubble on PATH; "" when neither
// exists (run make setup).
func Bin() string {
	p := filepath.Join(cni.ToolCache(), "hubble", Version, "bin", "hubble")
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("hubble"); err == nil {
		return p
	}
	return ""
}
