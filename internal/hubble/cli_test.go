package hubble

import (
	"os"
	"regexp"
	"testing"
)

func TestCLIVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HUBBLE_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != CLIVersion {
		t.Errorf("scripts/versions.sh pins hubble %q, internal/hubble.CLIVersion %s: keep them equal", m, CLIVersion)
	}
}
