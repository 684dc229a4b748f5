package datapath

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// quote is what an ICMP error quotes of p: its IPv4 header and 8 more bytes.
func quote(p pkt) []byte {
	b := p.build()
	return b[14 : 14+20+len(p.options)+8]
}

// restoredQuote is q (a quoted translated packet) as the pod sent it: source
// address and port (echo: id) back to pod's, the IPv4 header checksum
// recomputed, the rest (an embedded UDP or ICMP checksum) left as it was.
func restoredQuote(q []byte, pod netip.Addr, port uint16) []byte {
	q = append([]byte(nil), q...)
	hlen := int(q[0]&0x0f) * 4
	copy(q[12:16], pod.AsSlice())
	off := hlen // TCP/UDP source port
	if q[9] == protoICMP {
		off = hlen + 4 // echo id
	}
	binary.BigEndian.PutUint16(q[off:], port)
	q[10], q[11] = 0, 0
	binary.BigEndian.PutUint16(q[10:], checksum(q[:hlen], 0))
	return q
}

func TestPrivilegedBPFFromNetdevReverseMasquerade(t *testing.T) {
	requirePrivileged(t)
	// Seeded flows of several NAT ports: the range holds them all.
	d := loadMasqPorts(t, HostRoutingBPF, 0, testNATPort, 63000)

	tcpFlow := flow(protoTCP, podA, 40000, 61040, extHost, 8080, "tcp-syn")
	tcpMoved := flow(protoTCP, podA, 40000, 62000, extHost, 8080, "tcp-syn") // got another port
	udpMoved := flow(protoUDP, podA, 40000, 62001, extHost, 8080, "udp")
	echoMoved := flow(protoICMP, podA, 7, 62002, extHost, 0, "icmp")
	established := func(f NATEntry) NATEntry { f.State = "tcp-established"; return f }
	closing := func(f NATEntry) NATEntry { f.State = "tcp-closing"; return f }

	synAck := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, 8080).withDst(nodeIP, 61040).withTCPFlags(0x12)
	synAckMoved := synAck.withDst(nodeIP, 62000)
	rst := synAckMoved.withTCPFlags(0x04)
	udpReply := ipv4(protoUDP, extHost, nodeIP).withSrc(extHost, 8080).withDst(nodeIP, 62001)
	udpReplyNoCsum := udpReply.withoutUDPChecksum()
	echoReply := ipv4(protoICMP, extHost, nodeIP).withEcho(0, 62002)
	toPod := func(p pkt, port uint16) pkt { return p.withDst(podA, port) }

	// ICMP errors about translated packets, from a router on the way.
	sentTCP := ipv4(protoTCP, nodeIP, extHost).withSrc(nodeIP, 62000)
	sentUDP := ipv4(protoUDP, nodeIP, extHost).withSrc(nodeIP, 62001)
	sentEcho := ipv4(protoICMP, nodeIP, extHost).withEcho(8, 62002)
	icmpErr := func(typ, code uint8, mtu uint16, q []byte) pkt {
		return ipv4(protoICMP, router, nodeIP).withICMPError(typ, code, mtu, q)
	}
	fragNeeded := icmpErr(3, 4, 1400, quote(sentTCP))
	fragNeededBack := icmpErr(3, 4, 1400, restoredQuote(quote(sentTCP), mustAddr(podA), 40000)).withDst(podA, 0)
	portUnreach := icmpErr(3, 3, 0, quote(sentUDP))
	portUnreachBack := icmpErr(3, 3, 0, restoredQuote(quote(sentUDP), mustAddr(podA), 40000)).withDst(podA, 0)
	timeExceeded := icmpErr(11, 0, 0, quote(sentEcho))
	timeExceededBack := icmpErr(11, 0, 0, restoredQuote(quote(sentEcho), mustAddr(podA), 7)).withDst(podA, 0)
	// An error quoting a translated packet of no flow, and one quoting a packet of the node's own.
	strayErr := icmpErr(3, 4, 1400, quote(sentTCP.withSrc(nodeIP, 62999)))
	ownErr := icmpErr(3, 4, 1400, quote(ipv4(protoTCP, nodeIP, extHost).withSrc("192.168.0.12", 62000)))

	fwd := func(name string, in pkt, out []byte, seed, want NATEntry) natCase {
		return natCase{progCase: progCase{name: name, endpoints: seedA, in: in.build(), verdict: tcActRedirect, out: out, reason: "FORWARDED"},
			seed: []NATEntry{seed}, want: []NATEntry{want}}
	}
	pass := func(name string, in pkt, seed []NATEntry) natCase {
		return natCase{progCase: progCase{name: name, endpoints: seedA, in: in.build(), verdict: tcActOK, reason: "PASS_STACK"},
			seed: seed, want: seed}
	}
	cases := []natCase{
		fwd("TCP SYN-ACK", synAck, delivered(toPod(synAck, 40000)), tcpFlow, established(tcpFlow)),
		fwd("TCP SYN-ACK, another flow's port", synAckMoved, delivered(toPod(synAckMoved, 40000)), tcpMoved, established(tcpMoved)),
		fwd("TCP RST closes", rst, delivered(toPod(rst, 40000)), tcpMoved, closing(tcpMoved)),
		fwd("UDP reply", udpReply, delivered(toPod(udpReply, 40000)), udpMoved, udpMoved),
		fwd("UDP reply without checksum", udpReplyNoCsum, delivered(toPod(udpReplyNoCsum, 40000)), udpMoved, udpMoved),
		fwd("ICMP echo reply", echoReply, delivered(echoReply.withDst(podA, 0).withEcho(0, 7)), echoMoved, echoMoved),
		fwd("ICMP frag-needed about TCP", fragNeeded, delivered(fragNeededBack), tcpMoved, tcpMoved),
		fwd("ICMP port unreachable about UDP", portUnreach, delivered(portUnreachBack), udpMoved, udpMoved),
		fwd("ICMP time exceeded about echo", timeExceeded, delivered(timeExceededBack), echoMoved, echoMoved),
		pass("to the node, no NAT entry", synAck, []NATEntry{}),
		pass("to the node, other flow's entry", synAck.withSrc(extHost, 9090), []NATEntry{tcpFlow}),
		pass("ICMP error about no flow", strayErr, []NATEntry{tcpMoved}),
		pass("ICMP error about the node's own packet", ownErr, []NATEntry{tcpMoved}),
		// A pod is no router: only the quoted destination's own error comes from a pod address.
		pass("ICMP error from another pod about a flow", ipv4(protoICMP, "10.2.0.99", nodeIP).withICMPError(3, 4, 1400, quote(sentTCP)),
			[]NATEntry{tcpMoved}),
		pass("ICMP echo request to the node", ipv4(protoICMP, extHost, nodeIP).withEcho(8, 62002), []NATEntry{echoMoved}),
		pass("to another address", synAck.withDst("192.168.0.12", 61040), []NATEntry{tcpFlow}),
		// NAT ports are all in nat_port_min..nat_port_max: a packet to another port is
		// the node's own, even with an entry no datapath makes.
		pass("to a port outside the NAT range", synAck.withDst(nodeIP, 40000), []NATEntry{flow(protoTCP, podA, 40000, 40000, extHost, 8080, "tcp-syn")}),
		// Reverse-translated but not a local endpoint: the stack routes it.
		{progCase: progCase{name: "reply for a pod that is not local", in: synAck.build(), verdict: tcActOK, out: toPod(synAck, 40000).build(), reason: "PASS_STACK"},
			seed: []NATEntry{tcpFlow}, want: []NATEntry{established(tcpFlow)}},
	}
	for _, c := range cases {
		if c.verdict == tcActRedirect && !l4ChecksumValid(c.out) {
			t.Fatalf("%s: fixture has an invalid L4 checksum", c.name)
		}
	}
	runNATCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", cases)
}

// In legacy host routing the reply is translated and handed to the stack,
// which delivers it by the pod's /32 route.
func TestPrivilegedBPFFromNetdevReverseMasqueradeLegacy(t *testing.T) {
	requirePrivileged(t)
	d := loadMasqPorts(t, HostRoutingLegacy, 0, testNATPort, 63000)
	tcpFlow := flow(protoTCP, podA, 40000, 62000, extHost, 8080, "tcp-syn")
	synAck := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, 8080).withDst(nodeIP, 62000).withTCPFlags(0x12)
	sent := ipv4(protoTCP, nodeIP, extHost).withSrc(nodeIP, 62000)
	fragNeeded := ipv4(protoICMP, router, nodeIP).withICMPError(3, 4, 1400, quote(sent))
	back := fragNeeded.withICMPError(3, 4, 1400, restoredQuote(quote(sent), mustAddr(podA), 40000)).withDst(podA, 0)
	established := tcpFlow
	established.State = "tcp-established"
	cases := []natCase{
		{progCase: progCase{name: "TCP SYN-ACK", endpoints: seedA, in: synAck.build(), verdict: tcActOK, out: synAck.withDst(podA, 40000).build(), reason: "PASS_STACK"},
			seed: []NATEntry{tcpFlow}, want: []NATEntry{established}},
		{progCase: progCase{name: "ICMP frag-needed", endpoints: seedA, in: fragNeeded.build(), verdict: tcActOK, out: back.build(), reason: "PASS_STACK"},
			seed: []NATEntry{tcpFlow}, want: []NATEntry{tcpFlow}},
		{progCase: progCase{name: "to the node, no NAT entry", endpoints: seedA, in: synAck.build(), verdict: tcActOK, reason: "PASS_STACK"},
			want: []NATEntry{}},
	}
	runNATCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", cases)
}
