package labplan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MarkerFile is the file lab up writes first in a lab directory. lab down removes a
// directory only when it holds one: a directory without it is not a lab's.
const MarkerFile = ".myelin-lab"

// sharedDirs are directories below the top level that hold other programs' files;
// every top-level directory (/tmp, /run, /home, …) is refused as well.
var sharedDirs = []string{"/var/tmp", "/var/lib", "/var/log", "/var/run", "/usr/local", "/run/user"}

// ErrSharedDir is returned by CheckDir for a directory that other programs use.
var ErrSharedDir = errors.New("a shared directory, not one of the lab's own")

// NewPaths makes the lab directory dir (the --dir flag) absolute and clean and checks
// it with CheckDir against the user's home directory.
func NewPaths(dir string) (Paths, error) {
	home, _ := os.UserHomeDir()
	abs, err := CheckDir(dir, home)
	return Paths{Dir: abs}, err
}

// CheckDir returns dir made absolute and clean, or an error when it cannot be a lab
// directory. lab down removes the lab directory, every process with an argument in
// it and every mount below it, so dir must be the lab's own: it is refused when
// empty, the root, a top-level directory (/tmp, /run, /home, /root, …), one of
// sharedDirs, or home (the user's home directory) or a directory above it.
func CheckDir(dir, home string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", errors.New("empty: give the lab a directory of its own, e.g. " + DefaultDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("make it absolute: %w", err)
	}
	shared := abs == "/" || filepath.Dir(abs) == "/" || slices.Contains(sharedDirs, abs)
	if home != "" {
		home = filepath.Clean(home)
		shared = shared || home == abs || strings.HasPrefix(home, abs+"/")
	}
	if shared {
		example := filepath.Join(abs, "myelin-lab")
		if abs == "/" {
			example = DefaultDir
		}
		return "", fmt.Errorf("%s is %w (lab down removes the lab directory and what runs from it); "+
			"give the lab a directory of its own, e.g. %s", abs, ErrSharedDir, example)
	}
	return abs, nil
}

// Marker is the lab directory's marker file (MarkerFile).
func (p Paths) Marker() string { return p.join(MarkerFile) }

// MachineLock is the lock file lab up, down and restart hold while they run, one for
// the machine whatever the lab directory: the lab's namespaces, links and cgroups have
// fixed names (myelin-*), so a down of a lab in one directory removes a lab being
// built from another. Outside every lab directory, so down can remove its own while
// holding it.
const MachineLock = "/run/myelin-lab.lock"

// BenchLocks matches the lock files of myelin bench runs (one per product prefix,
// /run/<prefix>.lock; bench.lockRun): a killed run leaves its file, which lab down
// removes when no run holds it (lockfile.RemoveIfFree).
const BenchLocks = "/run/myelin-bench*.lock"

// Lock is the lock file lab up, down and restart hold (MachineLock, or LockFile when
// a test sets it).
func (p Paths) Lock() string {
	if p.LockFile != "" {
		return p.LockFile
	}
	return MachineLock
}
