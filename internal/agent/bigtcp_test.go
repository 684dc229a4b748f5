package agent

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/link"
)

func dev(name string, gso4, tso uint32) netlink.Link {
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, GSOIPv4MaxSize: gso4, TSOMaxSize: tso}}
}

// BIG TCP takes the size every device in the path can segment, and names the first
// device (or the kernel) that can't take more than 64 KiB.
func TestDecideBIGTCP(t *testing.T) {
	for _, c := range []struct {
		name string
		devs []netlink.Link
		size int
		why  string
	}{
		{"veths", []netlink.Link{dev("eth0", 65536, 524280)}, link.BIGTCPIPv4Size, ""},
		{"NIC segments 128 KiB", []netlink.Link{dev("eth0", 65536, 131072), dev("myelin_vxlan", 65536, 524280)}, 131072, ""},
		{"overlay can't", []netlink.Link{dev("eth0", 65536, 524280), dev("myelin_vxlan", 65536, 65536)}, 0, "myelin_vxlan segments at most 65536"},
		{"old kernel", []netlink.Link{dev("eth0", 0, 524280)}, 0, "Linux 6.3"},
	} {
		size, why := decideBIGTCP(c.devs)
		if size != c.size || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s: size %d reason %q, want %d and a reason with %q", c.name, size, why, c.size, c.why)
		}
	}
}
