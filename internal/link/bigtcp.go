package link

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// BIGTCPIPv4Size is the GSO and GRO size myelin gives a device for IPv4 BIG TCP:
// 192 KiB, three times the 64 KiB an IPv4 packet's length field can say (the kernel
// then leaves tot_len 0 and takes the length from the skb), as Cilium does.
const BIGTCPIPv4Size = 196608

// LegacyGSOMaxSize is the IPv4 GSO and GRO size without BIG TCP (GSO_LEGACY_MAX_SIZE).
const LegacyGSOMaxSize = 65536

// BIGTCPIPv4 says what IPv4 BIG TCP size device l can take: BIGTCPIPv4Size, or
// less when the device can't segment that much (its tso_max_size), or 0 with the
// reason when it can't take more than 64 KiB at all. It reads only l's attributes.
func BIGTCPIPv4(l netlink.Link) (size int, reason string) {
	a := l.Attrs()
	switch {
	case a.GSOIPv4MaxSize == 0:
		return 0, fmt.Sprintf("the kernel reports no gso_ipv4_max_size for %s (IPv4 BIG TCP needs Linux 6.3 or later)", a.Name)
	case a.TSOMaxSize <= LegacyGSOMaxSize:
		return 0, fmt.Sprintf("device %s segments at most %d bytes (tso_max_size); IPv4 BIG TCP needs more than %d", a.Name, a.TSOMaxSize, LegacyGSOMaxSize)
	}
	return min(BIGTCPIPv4Size, int(a.TSOMaxSize)), ""
}

// SetIPv4GSOGRO sets device l's gso_ipv4_max_size and gro_ipv4_max_size to size
// through h (the netns h was opened in; nil: the current one): BIGTCPIPv4Size turns
// IPv4 BIG TCP on, LegacyGSOMaxSize off. The kernel refuses a size above the
// device's tso_max_size.
func SetIPv4GSOGRO(h *netlink.Handle, l netlink.Link, size int) error {
	if h == nil {
		h = &netlink.Handle{} // as the package-level functions: the current netns
	}
	if err := h.LinkSetGSOIPv4MaxSize(l, size); err != nil {
		return fmt.Errorf("set gso_ipv4_max_size %d on %s: %w", size, l.Attrs().Name, err)
	}
	if err := h.LinkSetGROIPv4MaxSize(l, size); err != nil {
		return fmt.Errorf("set gro_ipv4_max_size %d on %s: %w", size, l.Attrs().Name, err)
	}
	return nil
}
