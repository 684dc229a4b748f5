package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// lab down finds the supervisor by its arguments as lab up starts it (its pid file's
// check: for its own directory only), and nothing else that merely names the
// directory or supervises; as a leftover process, a supervisor of any directory
// (supervisedDir: the lab's names are fixed, one lab runs per machine).
func TestIsSupervisorOf(t *testing.T) {
	const dir = "/run/myelin-lab"
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/local/bin/myelin", "lab", "supervise", "--dir", dir}, true},
		{[]string{"myelin", "lab", "supervise", "--dir=" + dir}, true},
		{[]string{"myelin", "lab", "supervise", "--dir", "/run/other-lab"}, false},
		{[]string{"myelin", "lab", "down", "--dir", dir}, false},
		{[]string{"flock", "/tmp/l", "myelin", "lab", "status", "--dir", dir}, false},
		{[]string{"ls", dir}, false},
		{[]string{"git", "grep", "lab", "supervise", "--dir", dir}, false},
		{[]string{"myelin", "lab", "supervise", "--dir"}, false},
	} {
		if got := isSupervisorOf(cmdline(c.args...), dir); got != c.want {
			t.Errorf("isSupervisorOf(%q) = %v, want %v", c.args, got, c.want)
		}
		_, any := supervisedDir(cmdline(c.args...))
		if wantAny := c.want || filepath.Base(c.args[0]) == "myelin" && slices.Contains(c.args, "supervise"); any != wantAny {
			t.Errorf("supervisedDir(%q) = %v, want %v", c.args, any, wantAny)
		}
	}
}

// The supervisor's pid file counts only while its pid is this lab's supervisor: after
// a crash the pid may be reused by the machine's supervisord, which must be left be.
func TestSupervisorPIDChecksArguments(t *testing.T) {
	proc := t.TempDir()
	paths := labplan.Paths{Dir: t.TempDir()}
	if err := os.WriteFile(paths.SupervisorPID(), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	process := func(state string, args ...string) {
		t.Helper()
		dir := filepath.Join(proc, "4242")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := "4242 (x) " + state + " 1 4242 4242 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		state string
		args  []string
		want  int
	}{
		{"S", []string{"/usr/bin/myelin", "lab", "supervise", "--dir", paths.Dir}, 4242},
		{"Z", []string{"/usr/bin/myelin", "lab", "supervise", "--dir", paths.Dir}, 0},
		{"S", []string{"/usr/bin/python3", "/usr/bin/supervisord", "-n", "-c", "/etc/supervisor/supervisord.conf"}, 0},
		{"S", []string{"s6-supervise", "getty"}, 0},
		{"S", []string{"/usr/bin/myelin", "lab", "supervise", "--dir", "/run/other-lab"}, 0},
	} {
		process(c.state, c.args...)
		if got := supervisorPIDIn(proc, paths); got != c.want {
			t.Errorf("pid 4242 %s %q: supervisorPID = %d, want %d", c.state, c.args, got, c.want)
		}
	}
}
