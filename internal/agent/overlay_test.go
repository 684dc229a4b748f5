package agent

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// myelin_vxlan decapsulates from anyone as soon as it is up, so a device the
// agent creates (first start, or replaced for a new port or node IP) stays
// down until myelin_from_overlay, the peer check, is attached to it; a start
// that fails to attach leaves it down. Before, EnsureDevice brought it up at
// once, and an agent failing between that and the attach (verifier error,
// apiserver away) left it decapsulating unchecked.
func TestPrivilegedOverlayUpOnlyAttached(t *testing.T) {
	pinDir := privilegedPinDir(t)
	testenv.InNetns(t, "agenttest-", func(string) {
		nodeIP := netip.MustParseAddr("192.0.2.10")
		mac := datapath.OverlayMAC(nodeIP)
		up := func(what string, want bool) {
			l, err := netlink.LinkByName(tunnel.DeviceName)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				return
			}
			if got := l.Attrs().RawFlags&uint32(1) != 0; got != want { // IFF_UP
				t.Errorf("%s: %s up = %v, want %v", what, tunnel.DeviceName, got, want)
			}
		}
		uplink := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0"}, PeerName: "uplink0p"}
		if err := netlink.LinkAdd(uplink); err != nil {
			t.Errorf("add uplink: %v", err)
			return
		}
		uplinkLink, err := netlink.LinkByName("uplink0")
		if err != nil {
			t.Error(err)
			return
		}
		dev, err := tunnel.EnsureDevice(8472, 1450, mac)
		if err != nil {
			t.Errorf("EnsureDevice: %v", err)
			return
		}
		up("created", false)
		dp, err := datapath.Load(datapath.Config{PinDir: pinDir, HostRouting: datapath.HostRoutingBPF,
			NodeIP: nodeIP, Tunnel: true, OverlayIfIndex: dev.Attrs().Index, OverlayMAC: mac, OverlayPort: 8472})
		if err != nil {
			t.Errorf("Load: %v", err)
			return
		}
		defer dp.Close()
		gone := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "gone0", Index: 1 << 20}}
		if err := attach(dp, gone, dev); err == nil {
			t.Error("attach to a missing uplink succeeded")
		}
		up("after a failed attach", false)
		if err := attach(dp, uplinkLink, dev); err != nil {
			t.Errorf("attach: %v", err)
			return
		}
		up("attached", true)
		// The next start keeps the attached device as it is.
		if _, err := tunnel.EnsureDevice(8472, 1450, mac); err != nil {
			t.Errorf("EnsureDevice again: %v", err)
		}
		up("kept", true)
		// A new port replaces it: down again until attached.
		if _, err := tunnel.EnsureDevice(4789, 1450, mac); err != nil {
			t.Errorf("EnsureDevice with another port: %v", err)
		}
		up("replaced", false)
		// The overlay program first, then up: an attach that fails there leaves
		// it down (a link known by name only: LinkSetUp would find the device,
		// the attach can't).
		byName := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: tunnel.DeviceName}}
		if err := attach(dp, uplinkLink, byName); err == nil {
			t.Error("attach to an overlay of ifindex 0 succeeded")
		}
		up("after a failed overlay attach", false)
		// A start that failed before attaching left it down: the next keeps it
		// down and brings it up once attached.
		kept, err := tunnel.EnsureDevice(4789, 1450, mac)
		if err != nil {
			t.Errorf("EnsureDevice after a failed start: %v", err)
			return
		}
		up("kept down", false)
		if err := attach(dp, uplinkLink, kept); err != nil {
			t.Errorf("attach the kept device: %v", err)
		}
		up("kept, attached", true)
	})
}
