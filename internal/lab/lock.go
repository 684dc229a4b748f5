package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/lockfile"
)

// ErrBusy is returned when another lab up, down or restart holds the lab's lock.
var ErrBusy = errors.New("another myelin lab command (up, down or restart) is running")

// labLock is the lab's lock file, held (flock) while up, down or restart runs, so that
// two of them never build and tear down the same lab at once.
type labLock struct{ *lockfile.Lock }

// lockLab takes the lock of the lab in paths without waiting: beside the lab directory
// (labplan.Paths.Lock), so down can remove the directory while holding it. It first
// refuses a directory labplan.CheckDir would not have returned (empty, relative, /,
// shared): the commands it guards remove what they find there.
func lockLab(paths labplan.Paths) (*labLock, error) {
	if dir, err := labplan.CheckDir(paths.Dir, ""); err != nil || dir != paths.Dir {
		return nil, fmt.Errorf("lab directory %q: not an absolute, clean directory of the lab's own (%v); make it with labplan.NewPaths", paths.Dir, err)
	}
	path := paths.Lock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock the lab: %w", err)
	}
	l, err := lockfile.TryLock(path)
	var held *lockfile.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("%w on the lab in %s (%s); wait for it to finish, then try again", ErrBusy, paths.Dir, held)
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("lock the lab: %w; lab up, down and restart run as root: run it with sudo", err)
	case err != nil:
		return nil, fmt.Errorf("lock the lab: %w", err)
	}
	return &labLock{l}, nil
}

// release unlocks, first removing the lock file when remove (lab down: nothing left).
func (l *labLock) release(remove bool) { l.Release(remove) }
