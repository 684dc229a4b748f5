package datapath

import (
	"encoding/binary"
	"maps"
	"net/netip"
)

// Source validation fixtures: pod A (10.1.0.10) sends from its host veth,
// ifindex 41, with the packet builder's default source MAC.
var (
	podAMAC    = mac("02:aa:00:00:00:01")
	podASender = EndpointInfo{IfIndex: 41, PodMAC: podAMAC, HostMAC: mac("02:bb:00:00:00:01"), ID: 6}
	ctxPodA    = &skbCtx{IngressIfindex: 41}
	seedAB     = map[string]EndpointInfo{podA: podASender, podBIP: podB}
)

// withSender makes a from-pod row without a context come from a valid
// endpoint: pod A's (podASender) is added when the seed has none for
// 10.1.0.10, and the packet enters on the veth of the endpoint owning its
// IPv4 (or ARP sender) address. A row whose source has no endpoint enters
// on pod A's veth, where it is a forgery. Rows about forgeries set ctx.
func withSender(c progCase) progCase {
	eps := maps.Clone(c.endpoints)
	if eps == nil {
		eps = map[string]EndpointInfo{}
	}
	if _, ok := eps[podA]; !ok {
		eps[podA] = podASender
	}
	c.endpoints, c.ctx = eps, ctxPodA
	if src, ok := frameSource(c.in); ok {
		if ep, ok := eps[src.String()]; ok {
			c.ctx = &skbCtx{IngressIfindex: uint32(ep.IfIndex)}
		}
	}
	return c
}

// frameSource returns the IPv4 source or ARP sender address of frame.
func frameSource(frame []byte) (netip.Addr, bool) {
	if len(frame) < 14+28 {
		return netip.Addr{}, false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case etherTypeIPv4:
		return netip.AddrFrom4([4]byte(frame[26:30])), true
	case etherTypeARP:
		return netip.AddrFrom4([4]byte(frame[28:32])), true
	}
	return netip.Addr{}, false
}

// fromPodB is p as pod B puts it on its eth0: from its MAC to its host veth's.
func fromPodB(p pkt) pkt { return p.withMACs(podBMAC, hostBMAC) }
