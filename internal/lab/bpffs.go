package lab

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// machineBPFFS is where the lab's nodes pin their BPF maps and links (below it, in
// bpffsDir), as real nodes do: their systemd mounts a bpffs there at boot
// (sys-fs-bpf.mount). A machine booted without that unit has an empty directory on
// sysfs there; the chart's agent, in a pod, then refuses to start (a mount in its
// container would not outlive a restart), and a host-process agent would mount one
// itself and leave it. So lab up provides what a node's boot would, and lab down
// takes back what it added.
const machineBPFFS = "/sys/fs/bpf"

// bpffsOwn are the files a new bpffs has of its own (the kernel's preloaded
// iterators), which are no one's pins.
var bpffsOwn = map[string]bool{"maps.debug": true, "progs.debug": true}

// IsBPFFS reports whether dir is on a BPF filesystem.
func IsBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return st.Type == unix.BPF_FS_MAGIC, nil
}

// mountBPFFS mounts a bpffs at machineBPFFS when none is there and writes record.
func mountBPFFS(record string) error {
	mounted, err := IsBPFFS(machineBPFFS)
	if err != nil {
		return fmt.Errorf("check the BPF filesystem at %s: %w", machineBPFFS, err)
	}
	if mounted {
		return nil
	}
	if err := os.WriteFile(record, []byte(machineBPFFS+"\n"), 0o644); err != nil {
		return err
	}
	if err := unix.Mount("bpffs", machineBPFFS, "bpf", 0, ""); err != nil {
		os.Remove(record)
		return fmt.Errorf("mount a BPF filesystem at %s for the nodes' pins (nothing mounted one at boot): %w", machineBPFFS, err)
	}
	return nil
}

// unmountBPFFS unmounts the bpffs lab up mounted (record says so) once the nodes'
// pins are gone (removeNodeDirs, which also removed bpffsDir if it was empty). A
// bpffs that holds anything else by then (bpffsDir included) is someone else's now:
// it stays, with a note. No record: nothing to do.
func unmountBPFFS(record string, note func(string, ...any)) error {
	if !exists(record) {
		return nil
	}
	if mounted, err := IsBPFFS(machineBPFFS); err != nil || !mounted {
		return os.Remove(record) // unmounted meanwhile
	}
	entries, err := os.ReadDir(machineBPFFS)
	for _, e := range entries {
		if err == nil && !bpffsOwn[e.Name()] {
			err = fmt.Errorf("it holds %s now", e.Name())
		}
	}
	if err != nil {
		note("kept the bpffs at %s that lab up mounted: %v", machineBPFFS, err)
		return os.Remove(record)
	}
	if err := unix.Unmount(machineBPFFS, 0); err != nil {
		return fmt.Errorf("unmount the bpffs lab up mounted at %s: %w", machineBPFFS, err)
	}
	note("unmounted the bpffs at %s (lab up mounted it)", machineBPFFS)
	return os.Remove(record)
}
