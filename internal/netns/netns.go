// Package netns runs code inside a network namespace. It is the one way myelin enters
// a namespace: on a locked OS thread that is returned to its original namespace (or
// never returned to the Go scheduler if that fails).
package netns

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs fn with the calling goroutine's thread inside the network namespace at path.
// fn must not start goroutines that expect to be in that namespace.
func Do(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime kills it when this goroutine ends
		// instead of reusing a thread stuck in the wrong namespace.
		return fmt.Errorf("return from netns %s: %w (after: %v)", path, err, fnErr)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Inode numbers of the machine's first namespaces, fixed by the kernel (dynamic ones
// are 0xF0000000 and up, so no other namespace has them): the initial PID namespace
// (since Linux 3.8) and the initial network namespace (in newer kernels; older ones
// give it a dynamic number).
const (
	procPIDInitIno = 0xEFFFFFFC
	procNetInitIno = 0xEFFFFFF9
)

// IsMachine reports whether the calling thread runs in the machine's network
// namespace: its namespace is the initial one by its fixed inode number, or, in the
// machine's PID namespace, it is PID 1's. Where neither can be told (a kernel without
// the fixed number, and PID 1's namespace unreadable or in another PID namespace, as
// in a container) it says false.
func IsMachine() (bool, error) {
	self, err := nsInode("/proc/thread-self/ns/net")
	if err != nil {
		return false, err
	}
	if self == procNetInitIno {
		return true, nil
	}
	if pid, err := nsInode("/proc/self/ns/pid"); err != nil || pid != procPIDInitIno {
		return false, nil
	}
	init, err := nsInode("/proc/1/ns/net")
	return err == nil && self == init, nil
}

// nsInode is the inode number of the namespace file at path.
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}
