// Package statefile writes the agent's state files (IPAM allocations, endpoint
// records, recorded CNI deletes) so that a crash or power loss leaves either the old
// file or the new one whole, never a truncated one; and checks the directories root
// writes in (PrivateDir, OutDir).
package statefile

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Write replaces path with b: it writes and syncs a new temporary file next to it
// (of a name of its own, created exclusively, never through a symlink: writeTemp),
// renames it over path (which replaces a symlink at path rather than following it)
// and syncs the directory, so the rename itself survives a power loss. Without the
// syncs a file system may persist the rename before the data, leaving an empty file
// that the next start can't read. On failure path is unchanged and the temporary file
// removed. Writers of one path at once each rename a whole file of their own; the
// last rename wins.
func Write(path string, b []byte, mode os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(b), mode)
}

// WriteFrom is Write of what r reads to its end (a file to install, copied without
// holding it in memory).
func WriteFrom(path string, r io.Reader, mode os.FileMode) error {
	tmp, err := writeTemp(filepath.Dir(path), r, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// tempPrefix starts the name of Write's temporary files: "." and a name no reader of
// a state directory takes for a record (theirs end in .json, .conflist...). The name
// does not grow with the target's, so a target of any name the file system takes has
// one.
const tempPrefix = ".tmp-"

// writeTemp writes what r reads to a new file of mode in dir, named tempPrefix and 16
// random hex digits, created exclusively and without following a symlink (one planted
// there fails the create: root's write never lands where it points), and synced. It returns
// the file's path; on error nothing is left.
func writeTemp(dir string, r io.Reader, mode os.FileMode) (string, error) {
	var f *os.File
	var path string
	for tries := 0; ; tries++ {
		var name [8]byte
		if _, err := rand.Read(name[:]); err != nil {
			return "", err
		}
		path = filepath.Join(dir, tempPrefix+hex.EncodeToString(name[:]))
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || tries == 3 {
			return "", err
		}
	}
	_, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("temporary file %s: %w", path, err)
	}
	return path, nil
}

// RemoveTemporary removes the temporary files interrupted Writes left in dir (a crash
// mid-write): this version's tempPrefix ones and older versions' <name>.tmp. Call it
// only while no Write into dir can be under way: it would remove that Write's file.
// A missing dir is no error.
func RemoveTemporary(dir string) error { return RemoveTemporaryOlder(dir, 0) }

// RemoveTemporaryOlder is RemoveTemporary for a dir others may be writing to: it
// removes only temporary files last modified more than age ago, which no Write (a few
// milliseconds) is still using.
func RemoveTemporaryOlder(dir string, age time.Duration) error {
	return removeTemporary(dir, age, func(name string) bool {
		return strings.HasPrefix(name, tempPrefix) || filepath.Ext(name) == ".tmp"
	})
}

// RemoveOwnTemporaryOlder is RemoveTemporaryOlder for a dir other programs keep files
// in (the node's CNI configuration dir): it removes only files named as this
// version's Write names its own (tempPrefix and 16 hex digits), never another tool's
// *.tmp.
func RemoveOwnTemporaryOlder(dir string, age time.Duration) error {
	return removeTemporary(dir, age, isOwnTemporary)
}

// isOwnTemporary says whether name is one writeTemp makes.
func isOwnTemporary(name string) bool {
	digits, ok := strings.CutPrefix(name, tempPrefix)
	if !ok || len(digits) != 16 {
		return false
	}
	_, err := hex.DecodeString(digits)
	return err == nil && strings.ToLower(digits) == digits
}

// removeTemporary removes the regular files in dir whose names match and that were
// last modified more than age ago (0: any).
func removeTemporary(dir string, age time.Duration, match func(name string) bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove temporary files in %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !match(name) {
			continue
		}
		if age > 0 {
			fi, err := e.Info()
			if err != nil || time.Since(fi.ModTime()) <= age {
				continue // gone meanwhile, or a Write may still be under way
			}
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove temporary file: %w", err))
		}
	}
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// PrivateDir makes dir (0700, parents too) for state files and refuses one that
// someone else could plant files in, as OutDir does, and one that is a symlink: root
// writing there would write where it points. It refuses dir's parent too where someone
// else could swap dir for a symlink (checkParent), and every directory above it
// (checkAncestors).
func PrivateDir(dir string) error {
	if err := checkParent(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := checkAncestors(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state directory %s: %w", dir, err)
	}
	if err := checkParent(dir); err != nil {
		return err
	}
	if err := checkAncestors(dir); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("state directory %s is a %v, not a directory: remove it (the agent's state directory holds only what the agent and its CNI plugin made)", dir, st.Mode().Type())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("state directory %s is writable by others (mode %v): files planted there could redirect what is written; make it 0700", dir, st.Mode().Perm())
	}
	if owner, ok := fileOwner(st); ok && owner != os.Geteuid() {
		return fmt.Errorf("state directory %s belongs to uid %d, not to uid %d, which writes it: remove it", dir, owner, os.Geteuid())
	}
	return nil
}

// checkParent refuses a parent of the state directory dir through which someone else
// could have root write elsewhere: a symlink (dir would be where it points); a
// directory of a user other than root and the caller, or one writable by others
// without the sticky bit (/tmp has it): its owner, or anyone, could rename dir away
// and put a symlink in its place. Each error names the parent and what to do.
func checkParent(dir string) error {
	parent := filepath.Dir(dir)
	st, err := os.Lstat(parent)
	if err != nil {
		return fmt.Errorf("state directory %s: its parent: %w", dir, err)
	}
	const fix = "keep the state directory in a directory only root can write " +
		"(for the CNI plugin: its conf's \"socket\", by default /run/myelin/agent.sock)"
	if st.Mode()&os.ModeSymlink != 0 {
		to, _ := os.Readlink(parent)
		return fmt.Errorf("state directory %s: its parent %s is a symlink (to %s), which could redirect what root writes: "+
			"name the directory it points to instead, or %s", dir, parent, to, fix)
	}
	if !st.IsDir() {
		return fmt.Errorf("state directory %s: its parent %s is a %v, not a directory: %s", dir, parent, st.Mode().Type(), fix)
	}
	if who := othersReplace(st); who != "" {
		return fmt.Errorf("state directory %s: its parent %s %s could replace it with a symlink: %s", dir, parent, who, fix)
	}
	return nil
}

// othersReplace says who besides root and the caller could replace the entries of
// directory st (rename one away and put a symlink in its place): its owner when that
// is another user ("belongs to uid N, who"), anyone when others may write it without
// the sticky bit ("is writable by others (mode M) without the sticky bit, so
// anyone"); "" for nobody. With the sticky bit, only an entry's own owner can.
func othersReplace(st os.FileInfo) string {
	if owner, ok := fileOwner(st); ok && owner != 0 && owner != os.Geteuid() {
		return fmt.Sprintf("belongs to uid %d, who", owner)
	}
	if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
		return fmt.Sprintf("is writable by others (mode %v) without the sticky bit, so anyone", st.Mode().Perm())
	}
	return ""
}

// checkAncestors refuses, as checkParent does its parent, the directories above the
// state directory dir's parent, up to the root, on the path as given and as its
// symlinks resolve: whoever can write one of them can rename the entry below it away
// and put a symlink (or a directory of their own) in its place. A directory of a user
// other than root and the caller is refused, and one writable by others unless it has
// the sticky bit and the entry below it belongs to root or the caller (/tmp/x of
// root's). Symlinks on the way are followed, so /var/run -> /run is checked as /run;
// a directory not there yet is skipped (PrivateDir checks again once it made them).
func checkAncestors(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	paths := []string{filepath.Dir(abs)}
	if real, err := filepath.EvalSymlinks(paths[0]); err == nil && real != paths[0] {
		paths = append(paths, real)
	}
	for _, p := range paths {
		for below, a := p, filepath.Dir(p); below != a; below, a = a, filepath.Dir(a) {
			if err := checkAncestor(dir, a, below); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkAncestor checks directory a above the state directory dir, which holds below.
func checkAncestor(dir, a, below string) error {
	const fix = "keep the state directory under directories only root can write"
	st, err := os.Stat(a)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state directory %s: %s above it: %w", dir, a, err)
	}
	if who := othersReplace(st); who != "" {
		return fmt.Errorf("state directory %s: %s above it %s could replace %s with a symlink: %s", dir, a, who, below, fix)
	}
	if st.Mode().Perm()&0o022 == 0 {
		return nil
	}
	// Sticky and writable by others: below's owner could still replace it.
	bst, err := os.Lstat(below)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	if owner, ok := fileOwner(bst); ok && owner != 0 && owner != os.Geteuid() {
		return fmt.Errorf("state directory %s: %s in the sticky, world-writable %s belongs to uid %d, who could replace it with a symlink: %s", dir, below, a, owner, fix)
	}
	return nil
}

// OutDir makes dir (0755, parents too) for a command's output files and refuses one
// that someone else could plant files in: writable by group or others (a symlink named
// like an output file would have root write where it points), or owned by another user
// than the caller or the one sudo ran it for. The error names the directory and what to
// pass instead.
func OutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output directory %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", dir, err)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("output directory %s is writable by others (mode %v): files planted there could redirect what is written; pass --out a directory of your own", dir, st.Mode().Perm())
	}
	owner, ok := fileOwner(st)
	if ok && owner != os.Geteuid() && strconv.Itoa(owner) != os.Getenv("SUDO_UID") {
		return fmt.Errorf("output directory %s belongs to uid %d, not to you: pass --out a directory of your own", dir, owner)
	}
	return nil
}
