package main

import (
	"io"
	"strings"
	"testing"
	"time"
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

// Traffic tools refuse flags that would keep them running past their bound (load
// generators stop by themselves), naming the flags; what the tests and the bench use
// passes.
func TestLabToolsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"session 24 x 500ms", checkSession(24, 500*time.Millisecond), ""},
		{"session until stopped", checkSession(0, 100*time.Millisecond), ""},
		{"session 10000 x 1m", checkSession(10000, time.Minute), "--count 10000 --interval 1m0s: would send for"},
		{"session negative interval", checkSession(5, -time.Second), "--interval -1s"},
		{"flood 50000 at 10000/s", checkSYNFlood(50000, 10000), ""},
		{"flood as fast as possible", checkSYNFlood(50000, 0), ""},
		{"flood 200000 at 1/s", checkSYNFlood(200000, 1), "--count 200000 --rate 1: would flood for"},
		{"flood negative rate", checkSYNFlood(10, -1), "--rate -1"},
		{"until-closed 4m", checkToolDuration("--until-closed", 4*time.Minute), ""},
		{"until-closed 1h", checkToolDuration("--until-closed", time.Hour), "--until-closed 1h0m0s: must be above 0 and at most 5m0s"},
		{"timeout 0", checkToolTimeout(0), "--timeout 0s"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
}

// connectivity test's pods run `connectivity serve`, which (unlike lab serve) has no
// lab-namespace check: its host pod runs in a real node's network namespace.
func TestConnectivityServeRunsOnNodes(t *testing.T) {
	serve, _, err := connectivityCommand().Find([]string{"serve"})
	if err != nil || serve.Name() != "serve" {
		t.Fatalf("connectivity serve: %v", err)
	}
	if serve.PreRunE != nil {
		t.Error("connectivity serve has a PreRunE: the host pod's node namespace must not be refused")
	}
	if serve.Flags().Lookup("listen") == nil || serve.Flags().Lookup("name") == nil {
		t.Error("connectivity serve lacks --listen or --name, which the test's pods pass")
	}
}
