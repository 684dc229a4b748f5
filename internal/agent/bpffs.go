package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ensureBPFFS makes sure the pin directory bpffsDir lives on a BPF filesystem. The
// check looks at the nearest existing directory at or above bpffsDir's parent (the
// chart's bpf.root, or below it with perNodePaths). Without one, an agent allowed to
// mount (--mount-bpffs, the host-process agent) mounts a bpffs at the parent (at
// /sys/fs/bpf itself when that is the nearest existing directory: a machine booted
// without systemd's sys-fs-bpf.mount leaves it an empty directory on sysfs); an agent
// in a pod must not, because that mount would stay in its container's mount namespace
// and every restart would lose the pinned maps and links (NAT and conntrack state
// with them), so it stops with what to do on the node instead.
func ensureBPFFS(bpffsDir string, mount bool) error {
	parent := filepath.Dir(filepath.Clean(bpffsDir))
	dir, magic, err := nearestFS(parent)
	if err != nil {
		return fmt.Errorf("check the BPF filesystem above --bpffs-dir %s: %w", bpffsDir, err)
	}
	if magic == unix.BPF_FS_MAGIC {
		return nil
	}
	if !mount {
		return fmt.Errorf("check the BPF filesystem: %s (above --bpffs-dir %s) is not on a bpffs (filesystem type %#x); "+
			"mount it on the node (mount -t bpf bpf %s, or a systemd sys-fs-bpf.mount unit) and restart the agent, "+
			"or set the chart's bpf.root to where the node mounts it", dir, bpffsDir, magic, dir)
	}
	at := parent
	if magic == unix.SYSFS_MAGIC {
		// sysfs's own bpffs mount point (/sys/fs/bpf), empty because nothing mounted a
		// bpffs there at boot: nothing can be created on sysfs, so the bpffs goes
		// there, where systemd would have put it, and the pin directories below it.
		at = dir
	}
	if err := os.MkdirAll(at, 0o755); err != nil {
		return fmt.Errorf("create the BPF filesystem mount point %s: %w", at, err)
	}
	if err := unix.Mount("bpffs", at, "bpf", 0, ""); err != nil {
		return fmt.Errorf("mount the BPF filesystem at %s: %w", at, err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create %s on the BPF filesystem mounted at %s: %w", parent, at, err)
	}
	return nil
}

// nearestFS returns dir or its nearest existing ancestor and the type of the
// filesystem it is on.
func nearestFS(dir string) (string, int64, error) {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			return dir, int64(st.Type), nil //nolint:unconvert // Type is int64 or uint32 by arch
		}
		if !errors.Is(err, unix.ENOENT) || dir == filepath.Dir(dir) {
			return dir, 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		dir = filepath.Dir(dir)
	}
}
