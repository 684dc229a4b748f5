package lab

import (
	"strings"
	"testing"
)

// lab down finds the supervisor by its arguments as lab up starts it, for its own
// directory only, and nothing else that merely names the directory or supervises.
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
		{[]string{"myelin", "lab", "supervise", "--dir"}, false},
	} {
		if got := isSupervisorOf(cmdline(c.args...), dir); got != c.want {
			t.Errorf("isSupervisorOf(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
