package lab

import (
	"fmt"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/link"
)

// underlayBIGTCP gives the underlay's side of every node's eth0 (the bridge ports in
// myelin-lab-net) the IPv4 GSO/GRO size of BIG TCP, as a NIC that segments 192 KiB
// would have: a packet a node sends with BIG TCP crosses the bridge whole instead of
// being segmented at the port (the kernel segments a packet larger than the device's
// gso_ipv4_max_size). Whether nodes send such packets is the agent's choice
// (enable-ipv4-big-tcp sets the node's eth0); with it off nothing changes. iproute2
// of Debian 12 has no gso_ipv4_max_size, hence netlink. Only lab netns devices.
func underlayBIGTCP(plan labplan.Plan) error {
	ns, err := vnetns.GetFromPath(labplan.NetNSPath(labplan.NetNS))
	if err != nil {
		return fmt.Errorf("open netns %s: %w", labplan.NetNS, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", labplan.NetNS, err)
	}
	defer h.Close()
	for _, n := range plan.Nodes {
		l, err := h.LinkByName(n.Peer)
		if err != nil {
			return fmt.Errorf("find underlay port %s: %w", n.Peer, err)
		}
		size, _ := link.BIGTCPIPv4(l)
		if size == 0 {
			continue // a kernel without IPv4 BIG TCP: the agents say so
		}
		if err := link.SetIPv4GSOGRO(h, l, size); err != nil {
			return err
		}
	}
	return nil
}
