package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnStateDir: the state directory ends 0700 whether new or left 0755 by the
// chart's hostPath; a symlink or a file in its place is refused, named.
func TestOwnStateDir(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh", "myelin")
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, open} {
		if err := ownStateDir(dir); err != nil {
			t.Fatalf("ownStateDir(%s): %v", dir, err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s is %v, want 0700", dir, fi.Mode().Perm())
		}
	}

	link := filepath.Join(base, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{link, file} {
		err := ownStateDir(bad)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--state-dir") {
			t.Errorf("ownStateDir(%s) = %v, want an error naming it and --state-dir", bad, err)
		}
	}
}

// A second agent on a state directory another holds is refused before it reads or
// writes anything there, naming the directory, the holder and what to do; once the
// first is gone (its lock dropped), the directory is free again.
func TestLockStateDirRefusesASecondAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myelin")
	first, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockStateDir(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid ") || !strings.Contains(err.Error(), "own --state-dir") {
		t.Fatalf("second lockStateDir(%s) = %v, want a refusal naming the directory, the holder and --state-dir", dir, err)
	}
	first.Release(false)
	again, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lockStateDir after the first agent left: %v", err)
	}
	again.Release(false)
}

// Cleanup refuses while an agent holds the state directory (it would put back what
// Cleanup removes), takes it once the agent is gone, and makes no state directory
// where there is none.
func TestCleanupLockWaitsForNoAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myelin")
	if release, err := cleanupLock(dir); err != nil {
		t.Fatalf("cleanupLock without a state directory: %v", err)
	} else {
		release()
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("cleanupLock made %s (lstat: %v)", dir, err)
	}
	agent, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cleanupLock(dir); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("cleanupLock while an agent holds %s = %v, want a refusal saying what to do", dir, err)
	}
	agent.Release(false)
	release, err := cleanupLock(dir)
	if err != nil {
		t.Fatalf("cleanupLock once the agent left: %v", err)
	}
	release()
}
