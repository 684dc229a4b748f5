package datapath

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// strangerIP is an underlay address of no node, podOfAIP one in node A's
// PodCIDR: node A's netns gets them as more addresses to send from.
// otherOfBIP is a second address of node B's (a VIP, a second network): no peer
// sends VXLAN to it, but a pod's datagram masqueraded on its way there arrives
// from its node's address.
const (
	strangerIP = "198.51.100.99"
	podOfAIP   = "10.1.0.77"
	otherOfBIP = "198.51.100.200"
)

// vxlanProbe is one hand-made VXLAN frame to node B's tunnel port, at its
// address (outerDst "") or another of its addresses.
type vxlanProbe struct {
	outerSrc, innerSrc string
	deliver            bool // else dropped as DROP_UNKNOWN_TUNNEL_PEER
	outerDst           string
}

// injectVXLAN sends VXLAN frames to node B's tunnel port from node A's
// netns, each carrying a UDP datagram for pod B: from node A with an inner
// source in A's PodCIDR or A's own address (delivered), from a stranger on
// the underlay, from node A with an inner source in a PodCIDR that is not
// A's, or pod B's own, and from a pod of node A's with its own address as both
// sources (dropped), and from node A to another address of node B's (dropped:
// peers send to a node's address). Pod B's socket must get exactly the first two.
func injectVXLAN(a, b *tunnelNode) error {
	probes := []vxlanProbe{
		{outerSrc: strangerIP, innerSrc: a.podIP.String()},
		{outerSrc: a.underlayIP.String(), innerSrc: "10.3.0.7"},
		{outerSrc: a.underlayIP.String(), innerSrc: b.podIP.String()},
		// A pod's own address: its packets would skip its egress policy.
		{outerSrc: podOfAIP, innerSrc: podOfAIP},
		// From node A's address, as a pod of A's masqueraded to B's other address:
		// any inner source of A's PodCIDR would pass the peer rule.
		{outerSrc: a.underlayIP.String(), innerSrc: podOfAIP, outerDst: otherOfBIP},
		// Its own address: what it could send natively too.
		{outerSrc: strangerIP, innerSrc: strangerIP, deliver: true},
		{outerSrc: a.underlayIP.String(), innerSrc: a.podIP.String(), deliver: true},
		{outerSrc: a.underlayIP.String(), innerSrc: a.underlayIP.String(), deliver: true},
	}
	err := inNode(b.ns, func() error {
		ul, err := netlink.LinkByName(underlayDev)
		if err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(otherOfBIP).To4(), Mask: net.CIDRMask(32, 32)}}
		if err := netlink.AddrAdd(ul, addr); err != nil {
			return fmt.Errorf("add %s to node B: %w", otherOfBIP, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var podFD int
	err = inNode(b.podNS, func() (err error) {
		podFD, err = udpSocket(netip.AddrPortFrom(b.podIP, 9999))
		return err
	})
	if err != nil {
		return err
	}
	defer unix.Close(podFD)
	before, err := counter(b.d, "from-overlay", "DROP_UNKNOWN_TUNNEL_PEER")
	if err != nil {
		return err
	}
	if err := inNode(a.ns, func() error { return sendProbes(probes, b) }); err != nil {
		return err
	}
	var want []string
	for i, p := range probes {
		if p.deliver {
			want = append(want, probeName(i, p))
		}
	}
	got, err := readProbes(podFD, len(want))
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("pod B received %q, want %q", got, want)
	}
	// The dropped probes went first, but each packet is handled on the CPU that sent
	// it, or later by that CPU's ksoftirqd on a loaded machine: one can still be
	// waiting when the delivered ones have arrived. Wait for the count (a bound for
	// a hang), then check it is exact.
	drops := uint64(len(probes) - len(want))
	var grew uint64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after, err := counter(b.d, "from-overlay", "DROP_UNKNOWN_TUNNEL_PEER")
		if err != nil {
			return err
		}
		if grew = after.Packets - before.Packets; grew >= drops || time.Now().After(deadline) {
			break
		}
	}
	if grew != drops {
		return fmt.Errorf("node B DROP_UNKNOWN_TUNNEL_PEER grew by %d, want %d", grew, drops)
	}
	return nil
}

func probeName(i int, p vxlanProbe) string {
	return fmt.Sprintf("probe %d outer %s inner %s", i, p.outerSrc, p.innerSrc)
}

// sendProbes sends the probes to node B's tunnel port, the dropped ones
// first, from the current netns (node A's), with the stranger's address added.
func sendProbes(probes []vxlanProbe, b *tunnelNode) error {
	ul, err := netlink.LinkByName(underlayDev)
	if err != nil {
		return err
	}
	for _, a := range []struct {
		ip   string
		bits int
	}{{strangerIP, 24}, {podOfAIP, 32}} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a.ip).To4(), Mask: net.CIDRMask(a.bits, 32)}}
		if err := netlink.AddrAdd(ul, addr); err != nil {
			return fmt.Errorf("add %s: %w", a.ip, err)
		}
	}
	for _, deliver := range []bool{false, true} {
		for i, p := range probes {
			if p.deliver != deliver {
				continue
			}
			inner := ipv4(protoUDP, p.innerSrc, b.podIP.String()).withDst(b.podIP.String(), 9999).
				withMACs(mac("02:aa:00:00:00:05"), OverlayMAC(b.underlayIP))
			inner.payload = []byte(probeName(i, p))
			frame := vxlanPayload(0, inner.build())
			dst := b.underlayIP
			if p.outerDst != "" {
				dst = mustAddr(p.outerDst)
			}
			if err := sendVXLAN(mustAddr(p.outerSrc), netip.AddrPortFrom(dst, tunnelPort), frame, b.decap); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendVXLAN sends one VXLAN frame from src to dst: without a UDP checksum
// when noCsum (as nodes send it, what myelin_from_netdev decapsulates),
// else with one (left to myelin_vxlan, which verifies it).
func sendVXLAN(src netip.Addr, dst netip.AddrPort, frame []byte, noCsum bool) error {
	fd, err := udpSocket(netip.AddrPortFrom(src, 0))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if noCsum {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
			return fmt.Errorf("SO_NO_CHECK: %w", err)
		}
	}
	if err := unix.Sendto(fd, frame, 0, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
		return fmt.Errorf("send from %s to %s: %w", src, dst, err)
	}
	return nil
}

// udpSocket opens a non-blocking UDP socket bound to at (current netns).
func udpSocket(at netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open UDP socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: at.Addr().As4(), Port: int(at.Port())}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("bind %s: %w", at, err)
	}
	return fd, nil
}

// readProbes reads datagrams from fd until n arrived (or 30 s passed: a bound for
// a hang, not for a loaded machine), then whatever else is already queued.
func readProbes(fd, n int) ([]string, error) {
	var got []string
	buf := make([]byte, 2048)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			if len(got) >= n || time.Now().After(deadline) {
				return got, nil
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return got, fmt.Errorf("read pod B's socket: %w", err)
		}
		got = append(got, string(buf[:m]))
	}
}

// bulkAcross sends 4 MiB from pod A to pod B over TCP and checks that every
// byte arrives in order: small segments and GSO packets alike (with decap,
// myelin_from_netdev takes the former and leaves the latter to myelin_vxlan;
// the log says how many packets the device got).
func bulkAcross(t *testing.T, a, b *tunnelNode) error {
	addr := netip.AddrPortFrom(b.podIP, 9998).String()
	var ln net.Listener
	if err := inNode(b.podNS, func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		return err
	}
	defer ln.Close()
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		data, err := io.ReadAll(c)
		got <- result{data, err}
	}()
	var c net.Conn
	if err := inNode(a.podNS, func() (err error) { c, err = net.DialTimeout("tcp4", addr, 10*time.Second); return err }); err != nil {
		return fmt.Errorf("dial %s from pod A: %w", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	_, werr := c.Write(want)
	c.Close()
	if werr != nil {
		return fmt.Errorf("send 4 MiB to %s: %w", addr, werr)
	}
	r := <-got
	if r.err != nil {
		return fmt.Errorf("receive from pod A: %w", r.err)
	}
	if !bytes.Equal(r.data, want) {
		return fmt.Errorf("pod B received %d bytes, want the %d sent, in order", len(r.data), len(want))
	}
	return inNode(b.ns, func() error {
		l, err := netlink.LinkByName(overlayDev)
		if err == nil && l.Attrs().Statistics != nil {
			t.Logf("node B: %s received %d packets", overlayDev, l.Attrs().Statistics.RxPackets)
		}
		return err
	})
}
