package lab

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// dirState is what lab up and down find at the lab directory.
type dirState int

const (
	dirAbsent  dirState = iota // nothing there
	dirEmpty                   // an empty directory: up may use it, down may remove it
	dirMarked                  // a lab's: it holds labplan.MarkerFile
	dirForeign                 // a directory with files and no marker: not a lab's
)

// labDirState says what is at the lab directory. Anything it cannot read is foreign:
// up and down then leave it alone.
func labDirState(paths labplan.Paths) dirState {
	if _, err := os.Lstat(paths.Dir); errors.Is(err, os.ErrNotExist) {
		return dirAbsent
	}
	if _, err := os.Lstat(paths.Marker()); err == nil {
		return dirMarked
	}
	f, err := os.Open(paths.Dir)
	if err != nil {
		return dirForeign
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); errors.Is(err, io.EOF) {
		return dirEmpty
	}
	return dirForeign
}

// makeLabDir creates the lab directory and marks it before anything else is written
// in it, so that lab down removes it even after an up that crashed right after.
func makeLabDir(paths labplan.Paths) error {
	if err := os.MkdirAll(paths.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(paths.Marker(), []byte("made by myelin lab up; myelin lab down removes this directory\n"), 0o644)
}

// errForeignDir explains why lab down left the directory at paths alone.
func errForeignDir(paths labplan.Paths) error {
	return fmt.Errorf("--dir %s holds files but no %s marker, so it is not a lab directory (or one made before lab up wrote the marker); "+
		"lab down left it and whatever runs from it alone; pass the lab's own --dir, or if this is a lab's, mark it (touch %s) and run lab down again",
		paths.Dir, labplan.MarkerFile, paths.Marker())
}

// removeLabDir removes the lab directory: all of it when it is marked, an empty one,
// and nothing else. keep leaves a marked directory in place for the next lab down.
func removeLabDir(paths labplan.Paths, keep bool, note func(string, ...any)) error {
	switch labDirState(paths) {
	case dirAbsent:
		return nil
	case dirForeign:
		return errForeignDir(paths)
	case dirEmpty:
		if err := os.Remove(paths.Dir); err != nil {
			return err
		}
	case dirMarked:
		if keep {
			// It holds the sysctls as they were: the next lab down needs them.
			note("kept %s for the next lab down", paths.Dir)
			return nil
		}
		if err := os.RemoveAll(paths.Dir); err != nil {
			return err
		}
	}
	note("removed %s", paths.Dir)
	return nil
}
