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

// Every lab traffic tool (a server or a client of lab addresses) checks that it runs
// in a lab namespace, not the machine's (labTrafficTool).
func TestLabTrafficToolsCheckNamespace(t *testing.T) {
	lab := labCommand()
	for _, path := range [][]string{
		{"serve"}, {"udp-flows"}, {"udp-big"}, {"http-session"}, {"syn-flood"}, {"peer"},
		{"dnstool", "serve"}, {"dnstool", "query"},
	} {
		cmd, _, err := lab.Find(path)
		if err != nil || cmd.Name() != path[len(path)-1] {
			t.Errorf("lab %v: not found (%v)", path, err)
			continue
		}
		if cmd.PreRunE == nil {
			t.Errorf("lab %v: no namespace check (PreRunE labTrafficTool)", path)
		}
	}
}
