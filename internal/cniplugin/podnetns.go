package cniplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// nsKind is what a CNI_NETNS path is.
type nsKind int

const (
	nsMissing nsKind = iota // no such path
	nsNotNet                // not a network namespace: a leftover file, a directory, another kind of namespace
	nsOwn                   // the plugin's own network namespace: the node's
	nsPod                   // another network namespace
)

// classifyNetNS says what path is. It reads the namespace type (NS_GET_NSTYPE, Linux
// 4.11) of a file on nsfs and compares the namespace with the calling thread's. The
// open does not block: a FIFO at path (a runtime's or an operator's mistake) would
// otherwise hang the plugin in open(2) before any deadline applies.
func classifyNetNS(path string) (nsKind, string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nsMissing, "it does not exist", nil
	}
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return 0, "", fmt.Errorf("statfs %s: %w", path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return nsNotNet, "it is not a namespace (a leftover of a deleted one is an empty file)", nil
	}
	typ, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return 0, "", fmt.Errorf("read the namespace type of %s: %w", path, err)
	}
	if typ != unix.CLONE_NEWNET {
		return nsNotNet, "it is a namespace of another kind than network", nil
	}
	var st, own unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, "", fmt.Errorf("stat %s: %w", path, err)
	}
	runtime.LockOSThread() // thread-self: the namespace this goroutine runs in
	err = unix.Stat("/proc/thread-self/ns/net", &own)
	runtime.UnlockOSThread()
	if err != nil {
		return 0, "", fmt.Errorf("stat the plugin's own network namespace: %w", err)
	}
	if st.Dev == own.Dev && st.Ino == own.Ino {
		return nsOwn, "it is the plugin's own network namespace (the node's)", nil
	}
	return nsPod, "", nil
}

// checkPodNetNS checks the CNI_NETNS of an ADD or CHECK before anything is asked of
// the agent or built: the pod's network namespace, which is neither missing, nor
// something else, nor the node's (where eth0 and a default route would be the node's).
func checkPodNetNS(cmd, path string) error {
	if path == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is empty",
			cmd+" needs the pod's network namespace path; check the runtime's CNI invocation")
	}
	kind, why, err := classifyNetNS(path)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, "cannot open CNI_NETNS", fmt.Sprintf("CNI_NETNS %s: %v", quote(path), err))
	}
	if kind == nsPod {
		return nil
	}
	return badNetNS(path, why)
}

// badNetNS is the error for a CNI_NETNS that is no pod network namespace.
func badNetNS(path, why string) error {
	return types.NewError(types.ErrInvalidNetNS, "CNI_NETNS is not the pod's network namespace",
		fmt.Sprintf("CNI_NETNS %s: %s; the runtime must pass the path of the pod sandbox's own network namespace (such as /var/run/netns/cni-<id>): check the runtime's CNI invocation, or whether the sandbox was removed",
			quote(path), why))
}
