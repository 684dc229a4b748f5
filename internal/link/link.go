// Package link holds the netlink link operations that the agent, the tunnel code and
// the CNI plugin share. It depends on netlink only, so the plugin stays small.
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
