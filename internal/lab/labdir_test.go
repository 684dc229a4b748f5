package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// lab down removes a lab directory whole only when lab up marked it: an empty one
// (an up that crashed before the marker) goes too, one with someone else's files
// stays, with an error naming --dir and the marker.
func TestRemoveLabDir(t *testing.T) {
	note := func(string, ...any) {}
	base := t.TempDir()
	write := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	marked := labplan.Paths{Dir: filepath.Join(base, "marked")}
	if err := makeLabDir(marked); err != nil {
		t.Fatal(err)
	}
	write(marked.Log("etcd"))
	if got := labDirState(marked); got != dirMarked {
		t.Fatalf("state of a directory lab up made: %v, want dirMarked", got)
	}
	if err := removeLabDir(marked, true, note); err != nil || !exists(marked.Dir) {
		t.Errorf("keep: %v, exists %v; want it kept", err, exists(marked.Dir))
	}
	if err := removeLabDir(marked, false, note); err != nil || exists(marked.Dir) {
		t.Errorf("marked: %v, exists %v; want it removed", err, exists(marked.Dir))
	}

	empty := labplan.Paths{Dir: filepath.Join(base, "empty")}
	if err := os.Mkdir(empty.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := removeLabDir(empty, false, note); err != nil || exists(empty.Dir) {
		t.Errorf("empty: %v, exists %v; want it removed", err, exists(empty.Dir))
	}

	foreign := labplan.Paths{Dir: filepath.Join(base, "foreign")}
	write(filepath.Join(foreign.Dir, "notes.txt"))
	err := removeLabDir(foreign, false, note)
	if err == nil || !strings.Contains(err.Error(), "--dir "+foreign.Dir) || !strings.Contains(err.Error(), labplan.MarkerFile) {
		t.Errorf("foreign: %v; want an error naming --dir %s and the marker", err, foreign.Dir)
	}
	if !exists(filepath.Join(foreign.Dir, "notes.txt")) {
		t.Errorf("foreign: its file was removed")
	}
	if err := CheckStale(foreign); err == nil || strings.Contains(err.Error(), "stale lab") || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("CheckStale of a directory without the marker: %v; want it refused as a --dir, not called a stale lab", err)
	}

	if err := removeLabDir(labplan.Paths{Dir: filepath.Join(base, "absent")}, false, note); err != nil {
		t.Errorf("absent: %v", err)
	}
}

// lab down finds processes started from the lab directory by a whole argument in it,
// not by a substring of the command line.
func TestHasArgIn(t *testing.T) {
	const dir = "/run/myelin-lab"
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"etcd", "--data-dir", dir + "/etcd"}, true},
		{[]string{"etcd", "--data-dir=" + dir + "/etcd"}, true},
		{[]string{"tail", "-f", dir + "/logs/etcd.log"}, true},
		{[]string{"kubectl", "--kubeconfig", dir + "//kubeconfig"}, true},
		{[]string{"myelin", "lab", "status", "--dir", dir}, true},
		{[]string{"rsync", "/backup" + dir + "/x", "/srv"}, false},
		{[]string{"sh", "-c", "cat " + dir + "/x"}, false},
		{[]string{"ls", dir + "-other/x"}, false},
		{[]string{"ls", "run/myelin-lab/x"}, false},
		{[]string{"supervisord", "-c", "/etc/supervisord.conf"}, false},
	} {
		if got := hasArgIn(cmdline(c.args...), dir); got != c.want {
			t.Errorf("hasArgIn(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// lab down leaves a concurrent `myelin lab status --dir DIR` running: it only reads.
func TestIsLabStatus(t *testing.T) {
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"myelin", "lab", "status", "--dir", "/run/myelin-lab"}, true},
		{[]string{"/usr/local/bin/myelin", "lab", "status", "--dir=/run/myelin-lab"}, true},
		{[]string{"myelin", "lab", "up", "--dir", "/run/myelin-lab"}, false},
		{[]string{"myelin", "lab", "supervise", "--dir", "/run/myelin-lab"}, false},
		{[]string{"kubelet", "lab", "status"}, false},
		{[]string{"myelin", "lab"}, false},
		{[]string{"myelin", "status"}, false},
	} {
		if got := isLabStatus(cmdline(c.args...)); got != c.want {
			t.Errorf("isLabStatus(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// lab down spares the processes it runs under (sudo myelin lab down --dir DIR has DIR
// as an argument).
func TestAncestors(t *testing.T) {
	got := ancestors(os.Getpid())
	if !got[os.Getpid()] || !got[os.Getppid()] {
		t.Errorf("ancestors(%d) = %v; want it and its parent %d", os.Getpid(), got, os.Getppid())
	}
	if p := parentPID([]byte("42 (a) b) c) S 7 42 42 0")); p != 7 {
		t.Errorf("parentPID of a comm with \") \" = %d, want 7", p)
	}
}
