// Package statefile writes the agent's state files (IPAM allocations, endpoint
// records, recorded CNI deletes) so that a crash or power loss leaves either the old
// file or the new one whole, never a truncated one; and checks the output directories
// of the tools that run as root (OutDir).
package statefile

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Write replaces path with b: it writes and syncs path+".tmp", renames it over path
// and syncs the directory, so the rename itself survives a power loss. Without the
// syncs a file system may persist the rename before the data, leaving an empty file
// that the next start can't read. On failure path is unchanged.
func Write(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, b, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func writeSynced(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
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
