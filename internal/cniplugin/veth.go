package cniplugin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/link"
	"github.com/myelin-net/myelin/internal/netns"
)

// podLink is what setupVeth built.
type podLink struct {
	HostIndex int
	HostMAC   net.HardwareAddr
	PodMAC    net.HardwareAddr
}

// setupVeth creates the veth pair (ifName in the pod netns, hostIf in the current one)
// and configures the pod side: address/32, a link-scoped route to the gateway, a
// permanent neighbour entry for it, and the default route via it. The host side
// gets IPv6 off (hardenHostVeth) before it goes up. A gso above 0 is the IPv4 GSO
// and GRO size of both ends (BIG TCP, bigTCPAttrs); 0 leaves the kernel's 64 KiB.
// On failure it deletes the pair if it created it, by the host side's index and
// name (link.DeleteAt): a name that exists already (a second ADD without DEL), or
// that another attachment of the container took meanwhile, is left as it is.
func setupVeth(netnsPath, ifName, hostIf string, mtu, routeMTU, gso int, ip, gw netip.Addr) (podLink, error) {
	var out podLink
	hostNS, err := vnetns.Get()
	if err != nil {
		return out, fmt.Errorf("open host netns: %w", err)
	}
	defer hostNS.Close()
	host, err := netlink.NewHandleAt(hostNS)
	if err != nil {
		return out, err
	}
	defer host.Close()

	// out.HostIndex, set once the pair exists, is what failure deletes: only the
	// pair this call created, never a later one of the same name.
	err = netns.Do(netnsPath, func() error {
		veth := &netlink.Veth{
			LinkAttrs:     bigTCPAttrs(netlink.LinkAttrs{Name: ifName, MTU: mtu}, gso),
			PeerName:      hostIf,
			PeerMTU:       uint32(mtu),
			PeerNamespace: netlink.NsFd(int(hostNS)),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			// An existing name (a second ADD without DEL) is another attachment's
			// pair: it stays as it is.
			return vethExists(err, ifName, hostIf, host)
		}
		hostLink, err := host.LinkByName(hostIf)
		if err != nil {
			// Gone as soon as made (a DEL of the container): nothing of ours to remove.
			return fmt.Errorf("find host veth %s: %w", hostIf, err)
		}
		out.HostIndex, out.HostMAC = hostLink.Attrs().Index, hostLink.Attrs().HardwareAddr
		pod, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		out.PodMAC = pod.Attrs().HardwareAddr
		return configurePod(pod, ip, gw, out.HostMAC, routeMTU)
	})
	if err != nil {
		if out.HostIndex != 0 {
			_ = link.DeleteAt(out.HostIndex, hostIf)
		}
		return podLink{}, err
	}
	if err := bringUpHostVeth(host, out.HostIndex, hostIf, gso); err != nil {
		_ = link.DeleteAt(out.HostIndex, hostIf)
		return podLink{}, fmt.Errorf("bring up host veth %s: %w", hostIf, err)
	}
	return out, nil
}

// bringUpHostVeth readies the host side of the pair setupVeth made, at index: still
// named hostIf (not another link that took the index's place), its GSO/GRO size (gso
// above 0), IPv6 off (hardenHostVeth), then up.
func bringUpHostVeth(host *netlink.Handle, index int, hostIf string, gso int) error {
	hostLink, err := host.LinkByIndex(index)
	if err != nil {
		return err
	}
	if name := hostLink.Attrs().Name; name != hostIf {
		return fmt.Errorf("the link at index %d is %s now", index, name)
	}
	if gso > 0 {
		if err := link.SetIPv4GSOGRO(host, hostLink, gso); err != nil {
			return err
		}
	}
	if err := hardenHostVeth(hostIf); err != nil {
		return err
	}
	return host.LinkSetUp(hostLink)
}

// vethExists says which name of a veth pair that could not be created exists
// already, if one does: the pod's (CNI_IFNAME, taken in the pod's netns, which it
// runs in) or the host's (the container has an attachment).
func vethExists(err error, ifName, hostIf string, host *netlink.Handle) error {
	if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create veth %s/%s: %w", ifName, hostIf, err)
	}
	if _, lerr := netlink.LinkByName(ifName); lerr == nil {
		return fmt.Errorf("create veth %s/%s: CNI_IFNAME %s exists already in the pod's network namespace "+
			"(another plugin's interface, or an ADD without DEL): DEL the attachment first or give the pod another interface name", ifName, hostIf, ifName)
	}
	if _, lerr := host.LinkByName(hostIf); lerr == nil {
		return fmt.Errorf("create veth %s/%s: host veth %s exists already: the container has an attachment (myelin gives a container "+
			"one interface: an ADD of a second interface name is refused); if it is stale, DEL it with its own CNI_IFNAME before another ADD", ifName, hostIf, hostIf)
	}
	return fmt.Errorf("create veth %s/%s: %w", ifName, hostIf, err)
}

// bigTCPAttrs gives a pod interface's attributes the IPv4 GSO and GRO size gso
// (0: the kernel's 64 KiB), which the kernel takes when it creates the veth pair:
// TCP in the pod then builds packets up to that size. The host end, which netlink
// creates with default sizes, gets them afterwards (setupVeth).
func bigTCPAttrs(a netlink.LinkAttrs, gso int) netlink.LinkAttrs {
	if gso > 0 {
		a.GSOIPv4MaxSize, a.GROIPv4MaxSize = uint32(gso), uint32(gso)
	}
	return a
}

// hostVethIPv6 are the per-interface IPv6 sysctls of a pod's host-side veth,
// in the order written: it never takes a router advertisement, never
// autoconfigures an address, gets no link-local address, and has IPv6 off.
// A pod can then plant no route or address on its node (CVE-2020-10749
// class), even before myelin_from_pod (which drops IPv6 anyway) is attached.
var hostVethIPv6 = []struct{ key, value string }{
	{"accept_ra", "0"},
	{"autoconf", "0"},
	{"addr_gen_mode", "1"}, // IN6_ADDR_GEN_MODE_NONE
	{"disable_ipv6", "1"},
}

// hardenHostVeth writes hostVethIPv6 for the link name of the current
// netns (the node's); it must run before the link goes up, when addrconf
// would start. A kernel without IPv6 has nothing to harden.
func hardenHostVeth(name string) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	dir := filepath.Join("/proc/sys/net/ipv6/conf", name)
	for _, s := range hostVethIPv6 {
		if err := os.WriteFile(filepath.Join(dir, s.key), []byte(s.value), 0o644); err != nil {
			return fmt.Errorf("turn off IPv6 on host veth %s: set %s to %s: %w", name, s.key, s.value, err)
		}
	}
	return nil
}

func configurePod(pod netlink.Link, ip, gw netip.Addr, gwMAC net.HardwareAddr, routeMTU int) error {
	idx := pod.Attrs().Index
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(pod, addr); err != nil {
		return fmt.Errorf("add %v to pod interface: %w", ip, err)
	}
	if err := netlink.LinkSetUp(pod); err != nil {
		return err
	}
	gwIP := net.IP(gw.AsSlice())
	steps := []struct {
		what string
		do   func() error
	}{
		{"route to the gateway", func() error {
			return netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: gwIP, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
		}},
		{"gateway neighbour", func() error {
			return netlink.NeighAdd(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, IP: gwIP, HardwareAddr: gwMAC})
		}},
		{"default route", func() error {
			// A route MTU below the device's (tunnel mode) makes TCP's MSS fit the tunnel.
			return netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: gwIP, MTU: routeMTU})
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("add %s in the pod: %w", s.what, err)
		}
	}
	return nil
}

// deletePodLink removes ifName inside the pod netns; a missing netns or link is
// fine, and so is a path that is no network namespace (what is left of a deleted one).
// The plugin's own netns is refused: its ifName is the node's.
func deletePodLink(netnsPath, ifName string) error {
	if netnsPath == "" {
		return nil
	}
	kind, why, err := classifyNetNS(netnsPath)
	switch {
	case err != nil:
		return err
	case kind == nsOwn:
		return badNetNS(netnsPath, why)
	case kind != nsPod:
		return nil
	}
	err = netns.Do(netnsPath, func() error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return nil
		}
		return netlink.LinkDel(l)
	})
	if err != nil && errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// peerNameIn is the name, in the pod network namespace at netnsPath, of the peer
// of the node's veth at hostIndex ("" when it is not there: another namespace,
// or none).
func peerNameIn(netnsPath string, hostIndex int) (string, error) {
	if netnsPath == "" || hostIndex == 0 {
		return "", nil
	}
	if kind, _, err := classifyNetNS(netnsPath); err != nil || kind != nsPod {
		return "", err
	}
	var name string
	err := netns.Do(netnsPath, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if _, ok := l.(*netlink.Veth); ok && l.Attrs().ParentIndex == hostIndex {
				name = l.Attrs().Name
			}
		}
		return nil
	})
	return name, err
}
