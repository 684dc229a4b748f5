package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// A second lab up, down or restart fails at once, saying which lab, also for a lab in
// another directory (the lab's namespaces and links are the machine's: one lock for
// it); the lock is free again once released, also after down removed its file.
func TestLockLab(t *testing.T) {
	tmp := t.TempDir()
	lock := filepath.Join(tmp, "myelin-lab.lock")
	paths := labplan.Paths{Dir: filepath.Join(tmp, "lab"), LockFile: lock}
	if got := (labplan.Paths{Dir: paths.Dir}).Lock(); got != labplan.MachineLock {
		t.Errorf("a lab's lock is %s, want the machine's %s whatever its directory", got, labplan.MachineLock)
	}
	first, err := lockLab(paths)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(paths.Lock()) == paths.Dir {
		t.Errorf("lock %s is inside the lab directory", paths.Lock())
	}
	_, err = lockLab(paths)
	if pid := fmt.Sprintf("pid %d holds", os.Getpid()); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), paths.Dir) || !strings.Contains(err.Error(), pid) {
		t.Fatalf("second lock: %v; want ErrBusy naming %s and %q", err, paths.Dir, pid)
	}
	if other, err := lockLab(labplan.Paths{Dir: paths.Dir + "2", LockFile: lock}); !errors.Is(err, ErrBusy) {
		if other != nil {
			other.release(true)
		}
		t.Fatalf("a lab in another directory while the first holds the lock: %v; want ErrBusy", err)
	}
	first.release(true)
	if _, err := os.Stat(paths.Lock()); !os.IsNotExist(err) {
		t.Errorf("lock file after release(true): %v; want it gone", err)
	}
	again, err := lockLab(paths)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.release(false)

	// Up, Down and Restart refuse a directory the --dir check would have refused, also
	// from callers that built their Paths by hand.
	for _, dir := range []string{"", "/", "/tmp", "lab", paths.Dir + "/"} {
		if l, err := lockLab(labplan.Paths{Dir: dir, LockFile: lock}); err == nil || errors.Is(err, ErrBusy) {
			if l != nil {
				l.release(true)
			}
			t.Errorf("lockLab(%q): %v; want it refused", dir, err)
		}
	}
}
