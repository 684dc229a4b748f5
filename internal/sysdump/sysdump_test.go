package sysdump

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNode is a node whose agent answers from memory; its one map holds 5 entries.
type fakeNode struct{ name string }

func (f fakeNode) Name() string { return f.name }
func (f fakeNode) Agent(_ context.Context, view string) (any, error) {
	if view == "policy" {
		return nil, errors.New("agent: starting")
	}
	return map[string]string{"view": view, "node": f.name, "token": "abc-secret"}, nil
}
func (f fakeNode) Drops(context.Context) ([]byte, error) {
	return []byte(`{"type":"drop"}` + "\n"), nil
}
func (f fakeNode) Run(_ context.Context, argv ...string) ([]byte, error) {
	return []byte(strings.Join(argv, " ")), nil
}
func (f fakeNode) Log(context.Context, int) ([]byte, error) {
	return []byte("level=info msg=started Authorization: Bearer 0123456789abcdef\n"), nil
}
func (f fakeNode) Maps(_ context.Context, max int) (map[string]any, error) {
	return map[string]any{"myelin_endpoints": ReadEntries(strings.NewReader(`[{"key":1},{"key":2},{"key":3},{"key":4},{"key":5}]`), max, 1<<20)}, nil
}

func readArchive(t *testing.T, path string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, e := range archiveEntries(t, path) {
		files[e.Name] = string(e.Data)
	}
	return files
}

func archiveEntries(t *testing.T, path string) []Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := ReadArchive(f)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestArchiveLayout(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	err := Run(context.Background(), &log, Options{Nodes: []Node{fakeNode{"n1"}, fakeNode{"n2"}}, Output: out, MapEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var top string
	for name := range files {
		top = strings.SplitN(name, "/", 2)[0]
		break
	}
	if !strings.HasPrefix(top, "myelin-sysdump-") {
		t.Fatalf("top directory %q, want myelin-sysdump-<time>", top)
	}
	for _, n := range []string{"n1", "n2"} {
		for _, f := range []string{"status.json", "config.json", "services.json", "endpoints.json", "drops.txt",
			"agent.log", "bpf-net.json", "bpf-links.json", "ip-route.txt", "maps/myelin_endpoints.json"} {
			if _, ok := files[top+"/nodes/"+n+"/"+f]; !ok {
				t.Errorf("archive lacks nodes/%s/%s", n, f)
			}
		}
		if _, ok := files[top+"/nodes/"+n+"/policy.json"]; ok {
			t.Errorf("nodes/%s/policy.json written although the agent failed", n)
		}
	}
	var m MapDump
	if err := json.Unmarshal([]byte(files[top+"/nodes/n1/maps/myelin_endpoints.json"]), &m); err != nil || m.Total != 5 || m.Shown != 2 || len(m.Entries) != 2 {
		t.Errorf("map dump: %+v (%v), want total 5, 2 shown", m, err)
	}
	var man Manifest
	if err := json.Unmarshal([]byte(files[top+"/manifest.json"]), &man); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if man.Errors["nodes/n1/policy.json"] == "" || man.Errors["cluster/"] == "" {
		t.Errorf("manifest errors %v: want the failed policy view and the missing cluster", man.Errors)
	}
	if len(man.Files) != len(files)-1 {
		t.Errorf("manifest lists %d files, archive holds %d besides it", len(man.Files), len(files)-1)
	}
	for name, body := range files {
		if strings.Contains(body, "abc-secret") || strings.Contains(body, "0123456789abcdef") {
			t.Errorf("%s holds a secret value:\n%s", name, body)
		}
	}
}

// The archive and the files in it are readable by their owner only, also when an
// older world-readable file of that name is replaced.
func TestArchiveMode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{fakeNode{"n1"}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("archive mode %v, want -rw-------", st.Mode().Perm())
	}
	for _, e := range archiveEntries(t, out) {
		if e.Mode != 0o600 {
			t.Errorf("%s has mode %o in the archive, want 600", e.Name, e.Mode)
		}
	}
}

// An output path that is a symlink (planted in a shared directory like /tmp, where
// sysdump often runs as root) is replaced, not followed: the file it points to keeps
// its content and the archive is a new file of its own.
func TestArchiveReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "dump.tar.gz")
	if err := os.Symlink(victim, out); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{fakeNode{"n1"}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("the symlink's target now holds %q (%v), want it untouched", b, err)
	}
	st, err := os.Lstat(out)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("output is %v, want a regular file -rw-------", st.Mode())
	}
	if len(archiveEntries(t, out)) == 0 {
		t.Error("output holds no archive")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

// What could not be collected is printed redacted too: people paste that output into
// issues.
func TestNotCollectedRedacted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{failingNode{fakeNode{"n1"}}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "not collected: nodes/n1/drops.txt") {
		t.Fatalf("output does not name the failed drops:\n%s", log.String())
	}
	if strings.Contains(log.String(), "0123456789abcdef") {
		t.Errorf("output holds the token:\n%s", log.String())
	}
}

// failingNode's drops fail with an error quoting a request's header.
type failingNode struct{ fakeNode }

func (failingNode) Drops(context.Context) ([]byte, error) {
	return nil, errors.New("monitor: request with Authorization: Bearer 0123456789abcdef refused")
}

// What could not be collected quotes what a node answered; printed, it is escaped so
// it can't move the cursor, clear the screen or forge lines.
func TestNotCollectedEscaped(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{hostileNode{fakeNode{"n1"}}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(log.String(), "\x1b\r") || strings.Contains(log.String(), "\nnot collected: forged") {
		t.Errorf("output holds control characters or a forged line:\n%q", log.String())
	}
	if !strings.Contains(log.String(), `\x1b[2J`) {
		t.Errorf("output does not show the escaped sequence:\n%q", log.String())
	}
}

// hostileNode's commands fail with output that would drive a terminal.
type hostileNode struct{ fakeNode }

func (hostileNode) Run(context.Context, ...string) ([]byte, error) {
	return nil, errors.New("bpftool: \x1b[2J\x1b[Hall good\r\nnot collected: forged")
}
