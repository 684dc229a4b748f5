package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/netns"
)

// Raw packet tools for the attack tests, run inside pod namespaces from the
// test process (internal/netns): captures, forged senders, IPv6 RAs.

// raPrefix is the prefix the attacker's router advertisements offer.
const raPrefix = "2001:db8:1:"

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// capture is an AF_PACKET socket on a pod's eth0.
type capture struct{ fd int }

// openPodCapture starts capturing every frame on eth0 of the pod netns at path.
func openPodCapture(path string) (*capture, error) {
	var c capture
	err := netns.Do(path, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		proto := htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return fmt.Errorf("open packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: l.Attrs().Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket: %w", err)
		}
		c.fd = fd
		return nil
	})
	return &c, err
}

func (c *capture) close() { unix.Close(c.fd) }

// captured is an IPv4 frame seen by a capture.
type captured struct {
	src     netip.Addr
	udpPort uint16 // UDP destination port, 0 for other protocols
}

// sourcesUntil returns the IPv4 frames captured until one from until
// arrived (or timeout passed) and what was queued by then.
func (c *capture) sourcesUntil(until netip.Addr, timeout time.Duration) ([]captured, error) {
	var srcs []captured
	seen := false
	buf := make([]byte, 65536)
	deadline := time.Now().Add(timeout)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			if seen || time.Now().After(deadline) {
				return srcs, nil
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return srcs, fmt.Errorf("read capture: %w", err)
		}
		if n < 34 || binary.BigEndian.Uint16(buf[12:]) != unix.ETH_P_IP {
			continue
		}
		f := captured{src: netip.AddrFrom4([4]byte(buf[26:30]))}
		if hlen := int(buf[14]&0x0f) * 4; buf[23] == unix.IPPROTO_UDP && n >= 14+hlen+4 {
			f.udpPort = binary.BigEndian.Uint16(buf[14+hlen+2:])
		}
		srcs = append(srcs, f)
		seen = seen || f.src == until
	}
}

// sendForged adds srcs to eth0 in the pod netns at path and sends, from
// each, a UDP datagram to port 9999 and a TCP SYN (a non-blocking connect)
// to port 8080 of every dst; then from own an 802.1Q-tagged datagram
// (sendTagged) and, last, one genuine datagram to each dst. It returns a function closing the TCP sockets.
func sendForged(path string, own netip.Addr, srcs, dsts []netip.Addr) (func(), error) {
	var fds []int
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	err := netns.Do(path, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, src := range srcs {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: src.AsSlice(), Mask: net.CIDRMask(32, 32)}}
			if err := netlink.AddrAdd(eth0, a); err != nil {
				return fmt.Errorf("add %s to the pod's eth0: %w", src, err)
			}
		}
		for _, src := range srcs {
			for _, dst := range dsts {
				if err := sendUDP(src, dst, "forged"); err != nil {
					return err
				}
				fd, err := startTCP(src, dst)
				if err != nil {
					return err
				}
				fds = append(fds, fd)
			}
		}
		for _, dst := range dsts {
			if err := sendTagged(eth0, own, dst); err != nil {
				return err
			}
		}
		for _, dst := range dsts {
			if err := sendUDP(own, dst, "genuine"); err != nil {
				return err
			}
		}
		return nil
	})
	return closeAll, err
}

// taggedPort is the UDP port of sendTagged's datagrams.
const taggedPort = 9998

// sendTagged sends, out of eth0, a UDP datagram from the pod's own address
// and MAC to dst:taggedPort with an 802.1Q tag (VLAN 5) in the frame.
func sendTagged(eth0 netlink.Link, own, dst netip.Addr) error {
	gw, err := gatewayMAC(eth0)
	if err != nil {
		return err
	}
	frame := append(append([]byte{}, gw...), eth0.Attrs().HardwareAddr...)
	frame = append(frame, 0x81, 0x00, 0x00, 0x05, 0x08, 0x00)
	frame = append(frame, ipv4UDP(own, dst, taggedPort, []byte("tag!"))...)
	return sendFrame(eth0, unix.ETH_P_8021Q, frame)
}

// ipv4UDP is an IPv4 packet (TTL 64) carrying a UDP datagram from src:40000
// to dst:port, without a UDP checksum (0: none).
func ipv4UDP(src, dst netip.Addr, port uint16, payload []byte) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	ip := make([]byte, 20, 20+len(udp))
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[12:], src.AsSlice())
	copy(ip[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	return append(ip, udp...)
}

// gatewayMAC is the MAC of the pod's gateway neighbour (its host veth).
func gatewayMAC(eth0 netlink.Link) (net.HardwareAddr, error) {
	neighs, err := netlink.NeighList(eth0.Attrs().Index, unix.AF_INET)
	if err != nil {
		return nil, err
	}
	for _, n := range neighs {
		if n.IP.Equal(net.ParseIP("169.254.1.1")) {
			return n.HardwareAddr, nil
		}
	}
	return nil, fmt.Errorf("no neighbour 169.254.1.1 on the pod's eth0")
}

// sendFrame sends frame (Ethernet header included) out of link.
func sendFrame(link netlink.Link, ethProto uint16, frame []byte) error {
	proto := htons(ethProto)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return fmt.Errorf("open packet socket: %w", err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: proto, Ifindex: link.Attrs().Index, Halen: 6}
	copy(to.Addr[:], frame[0:6])
	if err := unix.Sendto(fd, frame, 0, to); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// sendUDP sends payload from src (any port) to dst:9999.
func sendUDP(src, dst netip.Addr, payload string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
		return fmt.Errorf("bind UDP to %s: %w", src, err)
	}
	if err := unix.Sendto(fd, []byte(payload), 0, &unix.SockaddrInet4{Addr: dst.As4(), Port: 9999}); err != nil {
		return fmt.Errorf("send UDP %s -> %s: %w", src, dst, err)
	}
	return nil
}

// startTCP starts a connect from src to dst:8080 (its SYN leaves at once).
func startTCP(src, dst netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("bind TCP to %s: %w", src, err)
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: dst.As4(), Port: 8080})
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return 0, fmt.Errorf("connect TCP %s -> %s: %w", src, dst, err)
	}
	return fd, nil
}

// sendRouterAdvertisements sends count router advertisements out of eth0
// of the pod netns at path, from a link-local address to all nodes.
func sendRouterAdvertisements(path string, count int) error {
	return netns.Do(path, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		frame := routerAdvertisement(eth0.Attrs().HardwareAddr)
		for i := 0; i < count; i++ {
			if err := sendFrame(eth0, unix.ETH_P_IPV6, frame); err != nil {
				return fmt.Errorf("router advertisement: %w", err)
			}
		}
		return nil
	})
}

// routerAdvertisement is a valid ICMPv6 router advertisement (RFC 4861)
// from fe80::1 to ff02::1: default router for 1800 s, and the on-link,
// autonomous prefix raPrefix:/64, which a host accepting it would take an
// address from.
func routerAdvertisement(src net.HardwareAddr) []byte {
	ra := make([]byte, 16+32)
	ra[0], ra[4] = 134, 64 // router advertisement, current hop limit
	binary.BigEndian.PutUint16(ra[6:], 1800)
	opt := ra[16:]
	opt[0], opt[1], opt[2], opt[3] = 3, 4, 64, 0xc0 // prefix information, 32 bytes, /64, on-link + autonomous
	binary.BigEndian.PutUint32(opt[4:], 86400)
	binary.BigEndian.PutUint32(opt[8:], 14400)
	copy(opt[16:], netip.MustParseAddr(raPrefix+":").AsSlice())
	srcIP, dstIP := netip.MustParseAddr("fe80::1").As16(), netip.MustParseAddr("ff02::1").As16()
	pseudo := append(append(srcIP[:], dstIP[:]...), 0, 0, 0, byte(len(ra)), 0, 0, 0, 58)
	binary.BigEndian.PutUint16(ra[2:], checksum(append(pseudo, ra...)))
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ra)))
	ip[6], ip[7] = 58, 255 // ICMPv6, hop limit 255 (RAs with less are ignored)
	copy(ip[8:], srcIP[:])
	copy(ip[24:], dstIP[:])
	eth := append(append([]byte{0x33, 0x33, 0, 0, 0, 1}, src...), 0x86, 0xdd)
	return append(append(eth, ip...), ra...)
}

// checksum is the Internet checksum of b.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
