package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// vxlanFrame is what the tunnel test reads from an underlay frame:
// Ethernet, IPv4, UDP, VXLAN, then the inner Ethernet, IPv4 and ICMP.
type vxlanFrame struct {
	outerSrc, outerDst netip.Addr
	outerTTL           uint8
	outerHeaderOK      bool // IPv4 header checksum right, DF clear, lengths match the frame
	sport              uint16
	dport, udpCsum     uint16
	vxlanFlags         uint8
	vni                uint32
	innerSrc, innerDst netip.Addr
	innerTTL           uint8
	innerProto         uint8
	icmpType           uint8
}

// parseVXLAN decodes b if it is an IPv4/UDP frame carrying VXLAN with an
// inner IPv4 packet; ok is false for anything else (ARP, other traffic).
func parseVXLAN(b []byte) (f vxlanFrame, ok bool) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:]) != etherTypeIPv4 {
		return f, false
	}
	ip := b[14:]
	hlen := int(ip[0]&0x0f) * 4
	if ip[9] != protoUDP || len(ip) < hlen+8+8+14+20 {
		return f, false
	}
	f.outerSrc, f.outerDst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	f.outerTTL = ip[8]
	udp := ip[hlen:]
	f.outerHeaderOK = checksum(ip[:hlen], 0) == 0 && ip[6]&0x40 == 0 &&
		int(binary.BigEndian.Uint16(ip[2:])) == len(ip) && int(binary.BigEndian.Uint16(udp[4:])) == len(udp)
	f.sport, f.dport, f.udpCsum = binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:]), binary.BigEndian.Uint16(udp[6:])
	vx := udp[8:]
	f.vxlanFlags = vx[0]
	f.vni = binary.BigEndian.Uint32(vx[4:]) >> 8
	inner := vx[8:]
	if binary.BigEndian.Uint16(inner[12:]) != etherTypeIPv4 {
		return f, false
	}
	iip := inner[14:]
	ihlen := int(iip[0]&0x0f) * 4
	f.innerSrc, f.innerDst = netip.AddrFrom4([4]byte(iip[12:16])), netip.AddrFrom4([4]byte(iip[16:20]))
	f.innerTTL, f.innerProto = iip[8], iip[9]
	if f.innerProto == protoICMP && len(iip) > ihlen {
		f.icmpType = iip[ihlen]
	}
	return f, true
}

// matches says whether f is an ICMP packet of icmpType from pod to pod,
// tunnelled from node to node as tunnel_encap_redirect asks (of the device
// or itself): a valid outer header without DF, UDP from the local port range
// to the tunnel port, outer TTL 64, no UDP checksum, VNI 0 with the I flag,
// inner TTL innerTTL.
func (f vxlanFrame) matches(from, to *tunnelNode, icmpType, innerTTL uint8) bool {
	return f.outerSrc == from.underlayIP && f.outerDst == to.underlayIP && f.outerTTL == 64 &&
		f.outerHeaderOK && f.sport >= 32768 && f.sport <= 60999 &&
		f.dport == tunnelPort && f.udpCsum == 0 && f.vxlanFlags == 0x08 && f.vni == 0 &&
		f.innerSrc == from.podIP && f.innerDst == to.podIP && f.innerTTL == innerTTL &&
		f.innerProto == protoICMP && f.icmpType == icmpType
}

func (f vxlanFrame) String() string {
	return fmt.Sprintf("outer %s > %s ttl %d header ok %v udp %d > %d csum %#04x vxlan flags %#02x vni %d | inner %s > %s ttl %d proto %d icmp type %d",
		f.outerSrc, f.outerDst, f.outerTTL, f.outerHeaderOK, f.sport, f.dport, f.udpCsum, f.vxlanFlags, f.vni,
		f.innerSrc, f.innerDst, f.innerTTL, f.innerProto, f.icmpType)
}
