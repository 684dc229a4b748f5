package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockRun checks that a second bench run of the same prefix is refused while the
// first holds the lock, another prefix is not, and the lock is free once released.
func TestLockRun(t *testing.T) {
	dir := t.TempDir()
	release, err := lockRun(dir, ProductPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockRun(dir, ProductPrefix); !errors.Is(err, errBenchBusy) || !strings.Contains(err.Error(), "myelin-bench.lock") {
		t.Fatalf("second run: %v; want %v naming the lock file", err, errBenchBusy)
	}
	other, err := lockRun(dir, "myelin-benchtest-")
	if err != nil {
		t.Fatalf("another prefix: %v", err)
	}
	other()
	release()
	if _, err := os.Stat(filepath.Join(dir, "myelin-bench.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released lock file: %v; want it removed", err)
	}
	again, err := lockRun(dir, ProductPrefix)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
