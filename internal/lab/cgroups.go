package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

const cgroupFS = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup hierarchies: every v1 controller and the
// unified (v2) one under /sys/fs/cgroup, or /sys/fs/cgroup itself on a v2-only machine.
func cgroupHierarchies() []string {
	if exists(filepath.Join(cgroupFS, "cgroup.procs")) {
		return []string{cgroupFS}
	}
	var out []string
	entries, _ := os.ReadDir(cgroupFS)
	for _, e := range entries {
		dir := filepath.Join(cgroupFS, e.Name())
		if e.IsDir() && exists(filepath.Join(dir, "cgroup.procs")) {
			out = append(out, dir)
		}
	}
	return out
}

// createCgroups makes a node's cgroup parent in every hierarchy: the kubelet's
// cgroupfs driver expects its cgroupRoot in each. A v1 cpuset cgroup takes no tasks
// until it has cpus and mems, so they are copied from the parent.
func createCgroups(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent := filepath.Join(h, f)
			if !exists(parent) || h == cgroupFS {
				continue
			}
			v, err := os.ReadFile(parent)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// openNodeCgroup creates node's cgroup in the cgroup v2 hierarchy if missing and
// opens it, for a process to start in (SysProcAttr.CgroupFD).
func openNodeCgroup(node string) (int, error) {
	dir := labplan.HostCgroup(node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return -1, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return fd, nil
}

// leftoverCgroups lists the lab nodes' cgroup parents in every hierarchy.
func leftoverCgroups() []string {
	var out []string
	for _, h := range cgroupHierarchies() {
		matches, _ := filepath.Glob(filepath.Join(h, labplan.NodeNSPrefix+"*"))
		out = append(out, matches...)
	}
	return out
}

// killCgroupProcesses kills every process in the lab's cgroups (containers live in
// pod network namespaces the lab didn't name) and returns how many it found. In a
// cgroup2 tree it also writes cgroup.kill, which kills the whole subtree at once, so
// a process that keeps forking (a shell loop in a pod) leaves no child born after the
// read of cgroup.procs.
func killCgroupProcesses() int {
	killed := 0
	for _, top := range leftoverCgroups() {
		_ = os.WriteFile(filepath.Join(top, "cgroup.kill"), []byte("1"), 0) // cgroup v1: no such file
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
			return nil
		})
	}
	return killed
}

// removeCgroup removes a cgroup tree bottom-up (cgroups go with rmdir, not unlink).
func removeCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}
