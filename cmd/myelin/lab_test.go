package main

import (
	"io"
	"strings"
	"testing"
)

// Every lab command checks --dir before it runs: status, harmless, stands for them
// all here (down would remove what it found).
func TestLabRefusesSharedDir(t *testing.T) {
	for _, dir := range []string{"", "/", "/tmp", "/tmp/"} {
		cmd := labCommand()
		cmd.SetArgs([]string{"status", "--dir", dir})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.HasPrefix(err.Error(), "--dir ") {
			t.Errorf("lab status --dir %q: %v; want the --dir check to refuse it", dir, err)
		}
	}
}
