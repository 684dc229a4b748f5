// Package netns runs code inside a network namespace. It is the one way myelin enters
// a namespace: on a locked OS thread that is returned to its original namespace (or
// never returned to the Go scheduler if that fails).
package netns

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
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
