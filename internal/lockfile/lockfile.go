// Package lockfile is an exclusive lock on a file (flock) that names its holder: the
// lab's up, down and restart take one for the machine, bench runs one of their own.
// The lock goes with the process, so a killed holder leaves none held.
package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrHeld is what TryLock's error wraps while another holds the lock (a *HeldError).
var ErrHeld = errors.New("the lock is held")

// HeldError names the lock and its holder's pid ("" when it wrote none yet).
type HeldError struct{ Path, PID string }

func (e *HeldError) Error() string {
	if e.PID == "" {
		return "something holds " + e.Path
	}
	return "pid " + e.PID + " holds " + e.Path
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// A Lock is held until Release.
type Lock struct {
	f    *os.File
	path string
}

// TryLock takes the lock of path (creating the file) without waiting and writes this
// process's pid into it; while another holds it, the error is a *HeldError.
func TryLock(path string) (*Lock, error) {
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			pid, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &HeldError{Path: path, PID: strings.TrimSpace(string(pid))}
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// A holder that removed the file before unlocking leaves this lock on a file
		// nobody else opens: take the one at path instead.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			_ = f.Truncate(0)
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			return &Lock{f: f, path: path}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced; try again", path)
}

// Release unlocks, first removing the file when remove (nothing left to guard).
func (l *Lock) Release(remove bool) {
	if remove {
		_ = os.Remove(l.path)
	}
	_ = l.f.Close()
}

// RemoveIfFree removes the lock file at path if no one holds its lock (what a killed
// holder left), and reports whether it did. A missing file is no error.
func RemoveIfFree(path string) (bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	l, err := TryLock(path)
	switch {
	case errors.Is(err, ErrHeld):
		return false, nil
	case err != nil:
		return false, err
	}
	l.Release(true)
	return true, nil
}
