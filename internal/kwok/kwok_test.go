package kwok

import (
	"os"
	"regexp"
	"testing"
)

func TestVersionMatchesScript(t *testing.T) {
	b, err := os.ReadFile("../../scripts/build-kwok.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KWOK_VERSION=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Errorf("scripts/build-kwok.sh pins %q, internal/kwok %s: keep them equal", m, Version)
	}
}
