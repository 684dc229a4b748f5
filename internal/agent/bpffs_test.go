package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/testenv"
)

// An agent in a pod (--mount-bpffs=false) whose pin directory is not on a bpffs
// stops with the directory it checked and what to run on the node, before it
// creates anything. t.TempDir() is on tmpfs or a disk filesystem, never a bpffs.
func TestEnsureBPFFSRefusesWithoutMount(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{
		filepath.Join(root, "myelin"),                // the chart's <bpf.root>/myelin
		filepath.Join(root, "myelin", "node-1"),      // perNodePaths: the parent is missing too
		filepath.Join(root, "absent", "myelin", "n"), // several levels missing
	} {
		err := ensureBPFFS(dir, false)
		if err == nil {
			t.Fatalf("ensureBPFFS(%s, mount=false) on a non-bpffs = nil, want an error", dir)
		}
		for _, want := range []string{"--bpffs-dir " + dir, "is not on a bpffs", "mount -t bpf bpf " + root, "sys-fs-bpf.mount", "bpf.root"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ensureBPFFS(%s): error %q does not say %q", dir, err, want)
			}
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("ensureBPFFS created %v although it refused", entries)
	}
}

// On a machine booted without a bpffs at /sys/fs/bpf (no systemd sys-fs-bpf.mount),
// that directory is an empty mount point on sysfs, where nothing can be created: the
// host-process agent mounts the bpffs there and makes its pin directory's parent on it.
// Checked on a sysfs of its own in a private mount namespace, so the machine's
// /sys/fs/bpf is never touched.
func TestPrivilegedEnsureBPFFSMountsOnSysfsMountPoint(t *testing.T) {
	testenv.RequireRoot(t, "mount sysfs and a bpffs in a private mount namespace")
	sys := t.TempDir()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its mount namespace
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare the mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			if err := unix.Mount("sysfs", sys, "sysfs", 0, ""); err != nil {
				return fmt.Errorf("mount sysfs: %w", err)
			}
			mountPoint := filepath.Join(sys, "fs", "bpf")
			var st unix.Statfs_t
			if err := unix.Statfs(mountPoint, &st); err != nil || st.Type != unix.SYSFS_MAGIC {
				return fmt.Errorf("%s: want sysfs's empty bpffs mount point (statfs type %#x, %v)", mountPoint, st.Type, err)
			}
			pinDir := filepath.Join(mountPoint, "myelin", "node-1")
			if err := ensureBPFFS(pinDir, true); err != nil {
				return fmt.Errorf("ensureBPFFS(%s, mount=true): %w", pinDir, err)
			}
			if err := unix.Statfs(mountPoint, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%s after ensureBPFFS: statfs type %#x (%v), want a bpffs", mountPoint, st.Type, err)
			}
			if fi, err := os.Stat(filepath.Dir(pinDir)); err != nil || !fi.IsDir() {
				return fmt.Errorf("the pin directory's parent %s: %v", filepath.Dir(pinDir), err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
