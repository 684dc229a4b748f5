package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// ErrBusy is returned when another lab up, down or restart holds the lab's lock.
var ErrBusy = errors.New("another myelin lab command (up, down or restart) is running")

// labLock is the lab's lock file, held (flock) while up, down or restart runs, so that
// two of them never build and tear down the same lab at once.
type labLock struct {
	f    *os.File
	path string
}

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
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("lock the lab: %w; lab up, down and restart run as root: run it with sudo", err)
		}
		if err != nil {
			return nil, fmt.Errorf("lock the lab: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			pid, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				holder := "something holds " + path
				if pid := strings.TrimSpace(string(pid)); pid != "" {
					holder = "pid " + pid + " holds " + path
				}
				return nil, fmt.Errorf("%w on the lab in %s (%s); wait for it to finish, then try again", ErrBusy, paths.Dir, holder)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// A down that removed the file before unlocking leaves this lock on a file no
		// other command can open: take the one at path now.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			_ = f.Truncate(0)
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			return &labLock{f: f, path: path}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced; try again", path)
}

// release unlocks, first removing the lock file when remove (lab down: nothing left).
func (l *labLock) release(remove bool) {
	if remove {
		_ = os.Remove(l.path)
	}
	_ = l.f.Close()
}
