package hubbletool

import (
	"os"
	"regexp"
	"testing"
)

func TestVersionPinned(t *testing.T) {
	b, err := os.ReadFile("../../scripts/versions.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HUBBLE_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Errorf("scripts/versions.sh pins hubble %q, internal/hubbletool.Version %s: keep them equal", m, Version)
	}
}
