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

// A second lab up, down or restart on the same lab fails at once, saying which lab;
// the lock is free again once released, also after down removed its file.
func TestLockLab(t *testing.T) {
	paths := labplan.Paths{Dir: filepath.Join(t.TempDir(), "lab")}
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
	other, err := lockLab(labplan.Paths{Dir: paths.Dir + "2"})
	if err != nil {
		t.Fatalf("another lab's lock: %v", err)
	}
	other.release(true)
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
		if l, err := lockLab(labplan.Paths{Dir: dir}); err == nil || errors.Is(err, ErrBusy) {
			if l != nil {
				l.release(true)
			}
			t.Errorf("lockLab(%q): %v; want it refused", dir, err)
		}
	}
}
