package statefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, content := range []string{`{"a":1}`, `{"b":2}`} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("after Write(%s): %q %v", content, b, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v, want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

// A write that fails leaves the old file as it was and no temporary file.
func TestWriteFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path+".tmp", 0o700); err != nil { // the temporary file can't be created
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a blocked temporary file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("after the failed write the file holds %q, want old", b)
	}
}

// OutDir makes a missing directory and refuses one others may write in.
func TestOutDir(t *testing.T) {
	base := t.TempDir()
	mine := filepath.Join(base, "a", "results")
	if err := OutDir(mine); err != nil {
		t.Fatalf("a new directory: %v", err)
	}
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := OutDir(shared); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a world-writable directory: %v, want a refusal", err)
	}
}
