package tunnel

import (
	"bytes"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

// EnsureDevice creates (or keeps) the collect-metadata VXLAN device on UDP port with
// the given MTU and MAC (datapath.OverlayMAC of the node's IP). A device with another
// port, mode or MAC is replaced. A new device stays down: the caller brings it up
// (Up) once the overlay program is attached, since until then the kernel would
// decapsulate VXLAN from anyone with no peer check (an inner source claiming another
// node's pod). A kept device keeps its state, so an agent's restart stops no traffic:
// up when an earlier start attached the program (its pinned link outlives the agent),
// down when that start failed before. A device an agent older than this rule brought
// up before failing to attach stays up, unchecked, until this start's attach.
func EnsureDevice(port, mtu int, mac net.HardwareAddr) (netlink.Link, error) {
	if l, err := netlink.LinkByName(DeviceName); err == nil {
		if v, ok := l.(*netlink.Vxlan); ok && v.FlowBased && v.Port == port && bytes.Equal(l.Attrs().HardwareAddr, mac) {
			if l.Attrs().MTU != mtu {
				if err := netlink.LinkSetMTU(l, mtu); err != nil {
					return nil, fmt.Errorf("set %s MTU %d: %w", DeviceName, mtu, err)
				}
			}
			return l, nil
		}
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("replace %s: %w", DeviceName, err)
		}
	}
	dev := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: DeviceName, MTU: mtu, HardwareAddr: mac}, FlowBased: true, Port: port}
	if err := netlink.LinkAdd(dev); err != nil {
		return nil, fmt.Errorf("create VXLAN device %s (UDP %d): %w", DeviceName, port, err)
	}
	return netlink.LinkByName(DeviceName)
}

// Up brings the VXLAN device l up: after its overlay program is attached (EnsureDevice).
func Up(l netlink.Link) error {
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("bring %s up: %w", DeviceName, err)
	}
	return nil
}

// RemoveDevice deletes the VXLAN device if it exists (native routing has none).
func RemoveDevice() error { return link.DeleteByName(DeviceName) }
