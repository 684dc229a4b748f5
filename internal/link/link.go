// Package link holds the netlink operations that the agent, the routing and tunnel code
// and the CNI plugin share: deleting links by name and retrying interrupted dumps
// (Dump). It depends on netlink only, so the plugin stays small.
//
// A pod's host veth is named after its container id, and the same container id can
// be attached again (a runtime's DEL and retried ADD) while an older call still runs:
// whoever deletes a pod's veth names it by index and name (DeleteAt), so it never
// deletes the newer attachment's veth of the same name.
package link

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DeleteByName deletes the link called name in the current network namespace. A link
// that does not exist is not an error; any other lookup failure is.
func DeleteByName(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}

// DeleteAt deletes the link at index in the current network namespace if it is still
// called name. A link that is gone, or another link that now has the index or the
// name, is left alone and is not an error; so is index 0, which names no link.
func DeleteAt(index int, name string) error {
	if index <= 0 {
		return nil
	}
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return err
	}
	if l.Attrs().Name != name {
		return nil
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}
