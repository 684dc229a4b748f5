// Package link holds the netlink operations that the agent, the routing and tunnel code
// and the CNI plugin share: deleting links by name and retrying interrupted dumps
// (Dump). It depends on netlink only, so the plugin stays small.
package link

import (
	"errors"

	"github.com/vishvananda/netlink"
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
