package datapath

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
)

// A tiny packet builder for the BPF tests: Ethernet + IPv4 (+ options) +
// TCP/UDP/ICMP with valid checksums, or ARP.

const (
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86dd

	protoICMP = 1
	protoTCP  = 6
	protoUDP  = 17
)

// pkt describes one frame; build renders it.
type pkt struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.Addr
	ttl            uint8
	tos            uint8 // DSCP and ECN
	proto          uint8
	sport, dport   uint16
	options        []byte // IPv4 options, a multiple of 4 bytes
	payload        []byte
	fragOff        uint16 // IPv4 fragment offset in 8-byte units; 0: DF, unfragmented
	tcpFlags       uint8  // 0: SYN
	seq, ack       uint32 // TCP sequence and acknowledgment numbers
	tcpDoff        uint8  // TCP data offset in 4-byte words; 0: 5 (the payload follows the header)
	udpNoCsum      bool   // UDP checksum 0 ("none")
	l4Cut          int    // > 0: the L4 header and payload cut to this many bytes
	icmpSet        bool   // icmpType, icmpCode, icmpRest set; otherwise echo request id 7 seq 1
	icmpType       uint8
	icmpCode       uint8
	icmpRest       [4]byte // echo: id, seq; errors: unused, next-hop MTU
}

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// vxlanPayload is a VXLAN header with VNI vni (only the I flag set) before inner.
func vxlanPayload(vni uint32, inner []byte) []byte {
	return append([]byte{0x08, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}, inner...)
}

// ipv4 returns a packet from src to dst with TTL 64.
func ipv4(proto uint8, src, dst string) pkt {
	return pkt{
		srcMAC:  mac("02:aa:00:00:00:01"),
		dstMAC:  mac("02:bb:00:00:00:01"),
		src:     netip.MustParseAddr(src),
		dst:     netip.MustParseAddr(dst),
		ttl:     64,
		proto:   proto,
		sport:   40000,
		dport:   8080,
		payload: []byte("myelin test payload"),
	}
}

func (p pkt) withTTL(ttl uint8) pkt { p.ttl = ttl; return p }

// withHeaderChecksum is p with the TTL (2 or more) and the payload's length
// chosen so its IPv4 header checksum is want: the corner cases of the patch
// for a TTL one less (RFC 1624).
func (p pkt) withHeaderChecksum(want uint16) pkt {
	for ttl := 2; ttl < 256; ttl++ {
		for n := range 256 {
			q := p
			q.ttl, q.payload = uint8(ttl), make([]byte, n)
			if b := q.build(); binary.BigEndian.Uint16(b[14+10:]) == want {
				return q
			}
		}
	}
	panic(fmt.Sprintf("no TTL and payload length give header checksum %#04x", want))
}

func (p pkt) withTOS(tos uint8) pkt { p.tos = tos; return p }

func (p pkt) withMACs(src, dst net.HardwareAddr) pkt {
	p.srcMAC, p.dstMAC = src, dst
	return p
}

func (p pkt) withOptions(opts []byte) pkt { p.options = opts; return p }

func (p pkt) withSrc(ip string, port uint16) pkt {
	p.src, p.sport = netip.MustParseAddr(ip), port
	return p
}

func (p pkt) withDst(ip string, port uint16) pkt {
	p.dst, p.dport = netip.MustParseAddr(ip), port
	return p
}

func (p pkt) withTCPFlags(f uint8) pkt { p.tcpFlags = f; return p }

func (p pkt) withSeq(seq, ack uint32) pkt { p.seq, p.ack = seq, ack; return p }

// withTCPDataOffset sets the TCP header's data offset field to words (4-byte
// words) and nothing else: the header stays 20 bytes.
func (p pkt) withTCPDataOffset(words uint8) pkt { p.tcpDoff = words; return p }

func (p pkt) withoutUDPChecksum() pkt { p.udpNoCsum = true; return p }

// bare is p without payload: a SYN, a pure ACK, a FIN or RST as a stack sends them.
func (p pkt) bare() pkt { p.payload = nil; return p }

// withL4Cut cuts the L4 header (and payload) to its first n bytes; the IPv4
// total length says so, so only the L4 header is short.
func (p pkt) withL4Cut(n int) pkt { p.l4Cut = n; return p }

// withFragOffset makes p a later fragment (offset in 8-byte units).
func (p pkt) withFragOffset(off uint16) pkt { p.fragOff = off; return p }

// withEcho makes p an ICMP echo request (type 8) or reply (type 0) with id.
func (p pkt) withEcho(typ uint8, id uint16) pkt {
	p.proto, p.icmpSet, p.icmpType, p.icmpCode = protoICMP, true, typ, 0
	p.icmpRest = [4]byte{byte(id >> 8), byte(id), 0, 1}
	return p
}

// withICMPError makes p an ICMP error quoting quoted (an IPv4 header and
// the first 8 bytes after it); mtu is the next-hop MTU of frag-needed.
func (p pkt) withICMPError(typ, code uint8, mtu uint16, quoted []byte) pkt {
	p.proto, p.icmpSet, p.icmpType, p.icmpCode = protoICMP, true, typ, code
	p.icmpRest = [4]byte{0, 0, byte(mtu >> 8), byte(mtu)}
	p.payload = quoted
	return p
}

// build renders the frame with correct IPv4 and L4 checksums.
func (p pkt) build() []byte {
	l4 := p.l4()
	if p.l4Cut > 0 {
		l4 = l4[:p.l4Cut]
	}
	hlen := 20 + len(p.options)
	ip := make([]byte, hlen, hlen+len(l4))
	ip[0] = 0x40 | byte(hlen/4)
	ip[1] = p.tos
	binary.BigEndian.PutUint16(ip[2:], uint16(hlen+len(l4)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234) // id
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	if p.fragOff != 0 {
		binary.BigEndian.PutUint16(ip[6:], p.fragOff)
	}
	ip[8] = p.ttl
	ip[9] = p.proto
	copy(ip[12:16], p.src.AsSlice())
	copy(ip[16:20], p.dst.AsSlice())
	copy(ip[20:], p.options)
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	return append(ethernet(p.dstMAC, p.srcMAC, etherTypeIPv4), append(ip, l4...)...)
}

// l4 renders the transport header and payload.
func (p pkt) l4() []byte {
	var b []byte
	switch p.proto {
	case protoTCP:
		b = make([]byte, 20)
		binary.BigEndian.PutUint16(b[0:], p.sport)
		binary.BigEndian.PutUint16(b[2:], p.dport)
		binary.BigEndian.PutUint32(b[4:], p.seq)
		binary.BigEndian.PutUint32(b[8:], p.ack)
		b[12] = 5 << 4 // data offset
		if p.tcpDoff != 0 {
			b[12] = p.tcpDoff << 4
		}
		b[13] = 0x02 // SYN
		if p.tcpFlags != 0 {
			b[13] = p.tcpFlags
		}
		binary.BigEndian.PutUint16(b[14:], 65535)
	case protoUDP:
		b = make([]byte, 8)
		binary.BigEndian.PutUint16(b[0:], p.sport)
		binary.BigEndian.PutUint16(b[2:], p.dport)
		binary.BigEndian.PutUint16(b[4:], uint16(8+len(p.payload)))
	case protoICMP:
		b = make([]byte, 8)
		b[0] = 8 // echo request
		binary.BigEndian.PutUint16(b[4:], 7)
		binary.BigEndian.PutUint16(b[6:], 1)
		if p.icmpSet {
			b[0], b[1] = p.icmpType, p.icmpCode
			copy(b[4:], p.icmpRest[:])
		}
	}
	b = append(b, p.payload...)
	switch p.proto {
	case protoTCP:
		binary.BigEndian.PutUint16(b[16:], checksum(b, p.pseudoHeaderSum(len(b))))
	case protoUDP:
		if !p.udpNoCsum {
			binary.BigEndian.PutUint16(b[6:], checksum(b, p.pseudoHeaderSum(len(b))))
		}
	case protoICMP:
		binary.BigEndian.PutUint16(b[2:], checksum(b, 0))
	}
	return b
}

func (p pkt) pseudoHeaderSum(l4len int) uint32 {
	ph := make([]byte, 12)
	copy(ph[0:4], p.src.AsSlice())
	copy(ph[4:8], p.dst.AsSlice())
	ph[9] = p.proto
	binary.BigEndian.PutUint16(ph[10:], uint16(l4len))
	return sum16(ph, 0)
}

func ethernet(dst, src net.HardwareAddr, etherType uint16) []byte {
	b := make([]byte, 14)
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], etherType)
	return b
}

// arpRequest is a who-has for the link-local gateway, as a pod sends it.
func arpRequest() []byte {
	b := ethernet(mac("ff:ff:ff:ff:ff:ff"), mac("02:aa:00:00:00:01"), etherTypeARP)
	arp := make([]byte, 28)
	binary.BigEndian.PutUint16(arp[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(arp[2:], 0x0800) // IPv4
	arp[4], arp[5] = 6, 4
	binary.BigEndian.PutUint16(arp[6:], 1) // request
	copy(arp[8:14], mac("02:aa:00:00:00:01"))
	copy(arp[14:18], []byte{10, 1, 0, 10})
	copy(arp[24:28], []byte{169, 254, 1, 1})
	return append(b, arp...)
}

// ipv6Frame is a minimal IPv6 frame (header only).
func ipv6Frame() []byte {
	b := ethernet(mac("33:33:00:00:00:01"), mac("02:aa:00:00:00:01"), etherTypeIPv6)
	ip := make([]byte, 40)
	ip[0] = 0x60
	ip[6] = 59 // no next header
	ip[7] = 64
	return append(b, ip...)
}

// mutate returns a copy of b with f applied.
func mutate(b []byte, f func([]byte) []byte) []byte {
	return f(append([]byte(nil), b...))
}

func sum16(b []byte, sum uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

// checksum is the Internet checksum of b plus an initial partial sum.
func checksum(b []byte, initial uint32) uint16 {
	sum := sum16(b, initial)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// l4ChecksumValid reports whether the TCP, UDP or ICMP checksum of an
// unfragmented IPv4 frame verifies (a zero UDP checksum counts as valid).
func l4ChecksumValid(frame []byte) bool {
	hlen := int(frame[14]&0x0f) * 4
	ip, l4 := frame[14:14+hlen], frame[14+hlen:]
	switch ip[9] {
	case protoICMP:
		return checksum(l4, 0) == 0
	case protoUDP:
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return true
		}
	}
	ph := make([]byte, 12)
	copy(ph, ip[12:20])
	ph[9] = ip[9]
	binary.BigEndian.PutUint16(ph[10:], uint16(len(l4)))
	return checksum(l4, sum16(ph, 0)) == 0
}

// ipv4HeaderValid reports whether the IPv4 header checksum of frame verifies.
func ipv4HeaderValid(frame []byte) bool {
	hlen := int(frame[14]&0x0f) * 4
	return checksum(frame[14:14+hlen], 0) == 0
}
