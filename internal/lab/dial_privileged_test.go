package lab

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
)

// In a namespace shaped like the machine's during a lab (the lab's link, and an uplink
// with the default route), Dial sends a lab address that no route of the link covers
// (a node on the L3 underlay's second segment) out of the lab's link, never by the
// default route, which a plain dial takes; loopback is dialed as usual.
func TestPrivilegedDialLeavesOnlyByTheLabLink(t *testing.T) {
	testenv.RequireRoot(t, "make a network namespace with veths")
	testenv.InNetns(t, "labdialtest-", func(string) {
		lab, up := labDialLinks(t)
		if t.Failed() {
			return
		}
		offSegment := netip.MustParseAddr("198.18.1.12")
		gateway := netip.MustParseAddr("192.0.2.1")
		dial := func(d func(context.Context, string, string) (net.Conn, error)) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if c, err := d(ctx, "tcp", netip.AddrPortFrom(offSegment, 4244).String()); err == nil {
				c.Close()
				t.Errorf("dial of %s answered: nothing should be there", offSegment)
			}
		}
		dial(Dial)
		if !hasNeighbour(t, lab, offSegment) || hasNeighbour(t, up, gateway) {
			t.Errorf("after Dial: neighbour %s on %s %v (want true), gateway %s on the uplink %v (want false)",
				offSegment, labplan.ControlPlaneLink, hasNeighbour(t, lab, offSegment), gateway, hasNeighbour(t, up, gateway))
		}
		var plain net.Dialer
		dial(plain.DialContext)
		if !hasNeighbour(t, up, gateway) {
			t.Errorf("a plain dial of %s did not use the default route: this test can't see a leak", offSegment)
		}
		dialsLoopback(t, "with the lab's link")
	})
}

// In the machine's namespace without the lab's link (the lab is down), Dial refuses a
// lab address, saying why, and still dials loopback.
func TestPrivilegedDialWithoutTheLabLink(t *testing.T) {
	testenv.RequireRoot(t, "make a network namespace")
	machine := isMachine
	isMachine = func() (bool, error) { return true, nil } // the scratch netns stands in for it
	defer func() { isMachine = machine }()
	testenv.InNetns(t, "labdialtest-", func(string) {
		if lo, err := netlink.LinkByName("lo"); err != nil || netlink.LinkSetUp(lo) != nil {
			t.Errorf("lo up: %v", err)
			return
		}
		if _, err := Dial(context.Background(), "tcp", "198.18.0.1:6443"); err == nil || !strings.Contains(err.Error(), labplan.ControlPlaneLink) {
			t.Errorf("Dial of a lab address without %s = %v, want a refusal naming it", labplan.ControlPlaneLink, err)
		}
		dialsLoopback(t, "without the lab's link")
	})
}

// dialsLoopback checks that Dial reaches a listener on 127.0.0.1 (when: the case).
func dialsLoopback(t *testing.T, when string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Error(err)
		return
	}
	defer ln.Close()
	c, err := Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Errorf("Dial of loopback %s %s: %v", ln.Addr(), when, err)
		return
	}
	c.Close()
}

// labDialLinks makes, in the current netns, lo up, the lab's link (10.10.0.1/24) and
// an uplink (192.0.2.2/24) with the default route via 192.0.2.1; each a veth whose
// peer stays here, up, answering nothing.
func labDialLinks(t *testing.T) (lab, up netlink.Link) {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		t.Errorf("lo: %v", err)
		return nil, nil
	}
	mk := func(name, peer, cidr string) netlink.Link {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
		addr, err := netlink.ParseAddr(cidr)
		if err == nil {
			err = netlink.LinkAdd(veth)
		}
		var l, p netlink.Link
		if err == nil {
			l, err = netlink.LinkByName(name)
		}
		if err == nil {
			p, err = netlink.LinkByName(peer)
		}
		if err == nil {
			err = netlink.AddrAdd(l, addr)
		}
		if err == nil {
			err = netlink.LinkSetUp(p)
		}
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Errorf("link %s: %v", name, err)
		}
		return l
	}
	lab, up = mk(labplan.ControlPlaneLink, "labdial-cp", "10.10.0.1/24"), mk("labdial-up", "labdial-upp", "192.0.2.2/24")
	if t.Failed() {
		return nil, nil
	}
	gw := net.ParseIP("192.0.2.1")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: gw}); err != nil {
		t.Errorf("default route: %v", err)
	}
	return lab, up
}

// hasNeighbour says whether l's neighbour table has ip (in any state: a dial's packet
// to it made the kernel resolve it there).
func hasNeighbour(t *testing.T, l netlink.Link, ip netip.Addr) bool {
	ns, err := netlink.NeighList(l.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		t.Errorf("neighbours of %s: %v", l.Attrs().Name, err)
		return false
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return true
		}
	}
	return false
}
