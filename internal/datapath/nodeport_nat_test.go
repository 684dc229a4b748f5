package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// npTestFlow is a NodePortFlow of the fixtures (TCP to nodePort, backend port
// 8080, NAT port testNATPort) without time.
func npTestFlow(client string, clientPort uint16, backend string, id uint32, established bool, state string) NodePortFlow {
	return NodePortFlow{Proto: protoTCP, Client: mustAddr(client), ClientPort: clientPort, NodePort: nodePort,
		Backend: mustAddr(backend), BackendPort: 8080, NATPort: testNATPort, BackendID: id, Established: established, State: state}
}

// checkNodePortFlows compares the NodePort SNAT flows with want, ignoring LastSeen.
func checkNodePortFlows(d *Datapath, want []NodePortFlow) error {
	got, err := d.NodePortFlows()
	return checkFlows("NodePort", got, err, want, func(f *NodePortFlow) *time.Duration { return &f.LastSeen })
}

// checkEmpty fails unless m has no entries.
func checkEmpty(m *ebpf.Map) error {
	if n, err := countEntries(m); err != nil || n != 0 {
		return fmt.Errorf("%v holds %d entries (%v), want none", m, n, err)
	}
	return nil
}

// checkNodePortStats compares the NodePort counters with want.
func checkNodePortStats(d *Datapath, want NodePortStats) error {
	got, err := d.NodePortStats()
	if err != nil || got != want {
		return fmt.Errorf("NodePort stats = %+v (%v), want %+v", got, err, want)
	}
	return nil
}

// loadNodePortNAT loads load balancing and masquerade with NodePort tables
// of synMax, natMax and udpMax entries (0: the object's) and the NAT ports
// min..max, serving the NodePort feNodePort from the remote backend 2.
func loadNodePortNAT(t *testing.T, synMax, natMax, udpMax uint32, min, max uint16) *Datapath {
	t.Helper()
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, LoadBalancing: true, Masquerade: true, NodeIP: testNodeIP,
		ClusterCIDR: lbClusterCIDR, NATPortMin: min, NATPortMax: max, NodePortSynMax: synMax, NodePortNATMax: natMax, NodePortUDPMax: udpMax})
	if err := d.SetNoMasquerade([]netip.Prefix{lbClusterCIDR, netip.PrefixFrom(testNodeIP, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}})); err != nil {
		t.Fatal(err)
	}
	return d
}

// A NodePort flow to a remote backend: its SYN creates an embryonic flow
// in myelin_nodeport_syn (nothing in myelin_snat or myelin_lb_ct), the
// backend's SYN-ACK goes back from the NodePort and records its sequence
// number, an ACK that does not acknowledge it leaves the flow embryonic,
// the one that does moves it to myelin_nodeport_nat, where its packets
// keep their NAT port; GCNodePortNAT collects it once idle. A SYN-ACK that
// does not acknowledge the client's SYN (a forger spraying the NAT ports
// from the backend's address, who can't see the client's ISN) records
// nothing, nor does any after the first that does (a forger who sent the
// SYN itself must beat the backend's).
func TestPrivilegedNodePortSNATHandshake(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	toBackend := func(p pkt) []byte { return p.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).build() }
	reply := ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort)
	toClient := func(p pkt) []byte { return p.withSrc(nodeIP, nodePort).withDst(extHost, 40000).build() }
	synAck := reply.withTCPFlags(0x12).withSeq(1000, 1)
	badAck := req.withTCPFlags(0x10).withSeq(1, 1<<30)
	reconnect := req.withSeq(500, 0)
	synAck2 := reply.withTCPFlags(0x12).withSeq(2000, 501)
	ack := req.withTCPFlags(0x10).withSeq(1, 1001)
	forged := reply.withTCPFlags(0x12).withSeq(5000, 777)
	forgedAck := req.withTCPFlags(0x10).withSeq(1, 5001)
	data := req.withTCPFlags(0x18).withSeq(1, 1001)
	// ICMP errors about the client's segments, quoted as the backend was to
	// get them, go back to the client as errors about what it sent.
	errAbout := func(from, to string, typ, code uint8, mtu uint16, p pkt) pkt {
		q := quote(p.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080))
		if to == extHost {
			q = frontQuote(restoredQuote(q, mustAddr(extHost), 40000), testNodeIP, nodePort)
		}
		return ipv4(protoICMP, from, to).withICMPError(typ, code, mtu, q)
	}
	embryonic := func(state string) func(*Datapath) error {
		return func(d *Datapath) error {
			return checkNodePortFlows(d, []NodePortFlow{npTestFlow(extHost, 40000, remoteIP, 2, false, state)})
		}
	}
	established := func(d *Datapath) error {
		return checkNodePortFlows(d, []NodePortFlow{npTestFlow(extHost, 40000, remoteIP, 2, true, "tcp-established")})
	}
	row := func(name string, in pkt, out []byte, then func(*Datapath) error) lbCase {
		return lbCase{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: then,
			progCase: progCase{name: name, endpoints: seedB, in: in.build(), verdict: tcActOK, out: out, reason: "PASS_STACK"}}
	}
	runLBCases(t, d, []lbCase{
		row("SYN: embryonic flow", req, toBackend(req), func(d *Datapath) error {
			if err := embryonic("tcp-syn")(d); err != nil {
				return err
			}
			if err := checkNAT(d, []NATEntry{}); err != nil {
				return err
			}
			return checkEmpty(d.objs.MyelinLbCt)
		}),
		row("backend's port unreachable about the SYN: back to the client from the NodePort, not a reply",
			errAbout(remoteIP, nodeIP, 3, 3, 0, req), errAbout(nodeIP, extHost, 3, 3, 0, req).build(), embryonic("tcp-syn")),
		row("SYN-ACK: back from the NodePort, replied", synAck, toClient(synAck), embryonic("tcp-established")),
		row("ACK of another sequence number: still embryonic", badAck, toBackend(badAck), embryonic("tcp-established")),
		row("ACK of one past the SYN-ACK: still embryonic", req.withTCPFlags(0x10).withSeq(1, 1002),
			toBackend(req.withTCPFlags(0x10).withSeq(1, 1002)), embryonic("tcp-established")),
		row("the SYN-ACK's number without the ACK flag: still embryonic", req.withTCPFlags(0x08).withSeq(1, 1001),
			toBackend(req.withTCPFlags(0x08).withSeq(1, 1001)), embryonic("tcp-established")),
		row("a SYN-ACK acknowledging no SYN of the client's (forged): translated, not recorded", forged, toClient(forged), embryonic("tcp-established")),
		row("ACK of the forged SYN-ACK: still embryonic", forgedAck, toBackend(forgedAck), embryonic("tcp-established")),
		row("a second SYN-ACK acknowledging the SYN (a forger who sent it): not recorded, the first wins",
			reply.withTCPFlags(0x12).withSeq(3000, 1), toClient(reply.withTCPFlags(0x12).withSeq(3000, 1)), embryonic("tcp-established")),
		row("ACK of it: still embryonic", req.withTCPFlags(0x10).withSeq(1, 3001),
			toBackend(req.withTCPFlags(0x10).withSeq(1, 3001)), embryonic("tcp-established")),
		row("the client's SYN again with a new ISN after a SYN-ACK", reconnect, toBackend(reconnect), embryonic("tcp-established")),
		row("a SYN-ACK acknowledging the new SYN: not recorded (the first wins)", synAck2, toClient(synAck2), embryonic("tcp-established")),
		row("ACK of it: still embryonic", req.withTCPFlags(0x10).withSeq(501, 2001),
			toBackend(req.withTCPFlags(0x10).withSeq(501, 2001)), embryonic("tcp-established")),
		row("ACK of the first SYN-ACK: promoted", ack, toBackend(ack), established),
		row("data: same NAT port", data, toBackend(data), established),
		row("router's frag-needed about data: back to the client, from the router",
			errAbout(router, nodeIP, 3, 4, 1400, data), errAbout(router, extHost, 3, 4, 1400, data).build(), established),
		// A pod is no router: relayed, another pod's error would carry its data off the node.
		row("another pod's error about data: to the node's stack, untranslated",
			errAbout("10.2.0.99", nodeIP, 3, 4, 1400, data), errAbout("10.2.0.99", nodeIP, 3, 4, 1400, data).build(), established),
		row("reply: from the NodePort", reply.withTCPFlags(0x18), toClient(reply.withTCPFlags(0x18)), established),
	})
	if err := checkNodePortStats(d, NodePortStats{Created: 1, Promoted: 1}); err != nil {
		t.Error(err)
	}
	if n, err := d.GCNodePortNAT(MonotonicNow()); err != nil || n != 0 {
		t.Errorf("GCNodePortNAT of a fresh flow removed %d (%v), want 0", n, err)
	}
	if n, err := d.GCNodePortNAT(MonotonicNow() + NATTimeoutTCPEstablished + 2e9); err != nil || n != 2 {
		t.Errorf("GCNodePortNAT of an idle flow removed %d (%v), want 2", n, err)
	}
}

// Which SYN-ACK an embryonic TCP flow records: one acknowledging the SYN
// that created it, also after a second SYN with a new ISN (which a forger
// who sent both could otherwise use to move the number past the backend's
// answer to the first), after a forged SYN-ACK, RST or FIN, and one
// acknowledging a TCP Fast Open SYN's data too; none for a flow that no SYN
// created (re-created mid-stream), nor one a SYN a backend may drop
// unanswered created (with FIN or RST, a fragment, IP options, few hops
// left, a bad TCP header length: a forger who sent it would answer
// unraced), nor after the backend refused the SYN (an RST acknowledging it)
// or answered it from an old connection on the tuple (an ACK of other
// numbers), nor a SYN-ACK with FIN.
func TestPrivilegedNodePortSNATSynAckRecorded(t *testing.T) {
	requirePrivileged(t)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	reply := ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort).withTCPFlags(0x12)
	for _, c := range []struct {
		name     string
		opening  []pkt
		synAck   pkt
		promoted bool
	}{
		{"a second SYN's new ISN", []pkt{req, req.withSeq(500000, 0)}, reply.withSeq(7000, 500001), false},
		{"the first SYN's ISN after a second SYN", []pkt{req, req.withSeq(500000, 0)}, reply.withSeq(7000, 1), true},
		{"a SYN with FIN", []pkt{req.withTCPFlags(0x03).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with RST", []pkt{req.withTCPFlags(0x06).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with 1 hop left", []pkt{req.withTTL(1).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with 7 hops left", []pkt{req.withTTL(7).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with 8 hops left", []pkt{req.withTTL(8).withSeq(500, 0)}, reply.withSeq(7000, 501), true},
		// MF set, offset 0: the rest never comes, the backend never reassembles it.
		{"a SYN as a first fragment", []pkt{req.withFragOffset(0x2000).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with IP options", []pkt{req.withOptions([]byte{1, 1, 1, 1}).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with a TCP header length under 20", []pkt{req.withTCPDataOffset(4).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with a TCP header length past the segment", []pkt{req.withTCPDataOffset(15).withSeq(500, 0)}, reply.withSeq(7000, 501), false},
		{"a SYN with a TCP header length within the segment", []pkt{req.withTCPDataOffset(6).withSeq(500, 0)}, reply.withSeq(7000, 501), true},
		// The RST's own number is the SYN-ACK's: taken for a SYN-ACK, it would promote.
		{"after the backend's RST acknowledging the SYN", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x14).withSeq(7000, 501)}, reply.withSeq(7000, 501), false},
		{"after an RST acknowledging another number", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x14).withSeq(0, 900000)}, reply.withSeq(7000, 501), true},
		{"after an RST without ACK", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x04).withSeq(0, 501)}, reply.withSeq(7000, 501), true},
		{"after a FIN without ACK", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x01).withSeq(0, 501)}, reply.withSeq(7000, 501), true},
		// The backend's answer from a connection it still holds on the tuple
		// (the NAT port was another flow's): an ACK of that one's numbers.
		{"after a bare ACK", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x10).withSeq(7000, 123456)}, reply.withSeq(7000, 501), false},
		{"after a FIN-ACK", []pkt{req.withSeq(500, 0), reply.withTCPFlags(0x11).withSeq(7000, 123456)}, reply.withSeq(7000, 501), false},
		{"a bare SYN (no payload)", []pkt{req.bare().withSeq(500, 0)}, reply.withSeq(7000, 501), true},
		{"after a SYN-ACK acknowledging another number", []pkt{req.withSeq(500, 0), reply.withSeq(9000, 900000)}, reply.withSeq(7000, 501), true},
		{"a SYN-ACK with FIN", []pkt{req.withSeq(500, 0)}, reply.withTCPFlags(0x13).withSeq(7000, 501), false},
		{"a Fast Open SYN's data acknowledged", []pkt{req.withSeq(500, 0)}, reply.withSeq(7000, 501+100), true},
		{"more than a SYN's data past it", []pkt{req.withSeq(500, 0)}, reply.withSeq(7000, 501+0x10000), false},
		{"a flow a non-SYN created", []pkt{req.withTCPFlags(0x10).withSeq(5, 9)}, reply.withSeq(7000, 0), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
			for _, p := range append(c.opening, c.synAck) {
				forwardedOut(t, d, p)
			}
			forwardedOut(t, d, req.withTCPFlags(0x10).withSeq(501, 7001))
			flows, err := d.NodePortFlows()
			if err != nil || len(flows) != 1 || flows[0].Established != c.promoted {
				t.Errorf("flows after the client's ACK of the SYN-ACK: %+v (%v), want promoted %v", flows, err, c.promoted)
			}
		})
	}
}

// A reply to the NAT port of a flow forgotten while its reverse entry stays
// (the LRU evicted its forward entry) records nothing on the new flow of the
// same client tuple, which has a port of its own: a forger who sent the new
// flow's SYN, and knows its number, would answer it over the stale port
// unraced by the backend; for UDP any reply would do. The reply to the new
// flow's port counts. (TCP packets: a SYN, SYN-ACKs, the client's ACK; UDP
// ignores the flags and numbers.)
func TestPrivilegedNodePortSNATReplyOfStaleReverse(t *testing.T) {
	requirePrivileged(t)
	for _, proto := range []uint8{protoTCP, protoUDP} {
		t.Run(fmt.Sprint("proto ", proto), func(t *testing.T) { testReplyOfStaleReverse(t, proto) })
	}
}

func testReplyOfStaleReverse(t *testing.T, proto uint8) {
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	if proto == protoUDP {
		req = udpNodePort(t, d)
	}
	stale := binary.BigEndian.Uint16(forwardedOut(t, d, req.withSeq(100, 0))[34:])
	fk := myelinNatKey{Saddr: networkUint32(mustAddr(extHost)), Daddr: networkUint32(testNodeIP), Sport: htons(40000),
		Dport: htons(nodePort), Proto: proto, Dir: uint8(myelinNatDirNAT_DIR_EGRESS)}
	if err := d.objs.MyelinNodeportSyn.Delete(fk); err != nil {
		t.Fatal(err)
	}
	port := binary.BigEndian.Uint16(forwardedOut(t, d, req.withSeq(900, 0))[34:])
	if port == stale {
		t.Fatalf("the new flow got the stale flow's NAT port %d", port)
	}
	reply := ipv4(proto, remoteIP, nodeIP).withSrc(remoteIP, 8080).withTCPFlags(0x12)
	promoted := func(synAck pkt, ack uint32) bool {
		t.Helper()
		forwardedOut(t, d, synAck)
		forwardedOut(t, d, req.withTCPFlags(0x10).withSeq(901, ack))
		flows, err := d.NodePortFlows()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			if f.NATPort == port {
				return f.Established
			}
		}
		t.Fatalf("no flow with NAT port %d: %+v", port, flows)
		return false
	}
	if promoted(reply.withDst(nodeIP, stale).withSeq(7000, 901), 7001) {
		t.Errorf("a reply to the stale NAT port %d promoted the new flow (port %d)", stale, port)
	}
	if !promoted(reply.withDst(nodeIP, port).withSeq(8000, 901), 8001) {
		t.Errorf("the reply to the new flow's port %d did not count", port)
	}
}

// Reclaiming the port of an idle embryonic flow whose client tuple holds a
// new flow by now (its forward entry evicted, the client connected again on
// another port) leaves that new flow's forward entry alone: deleted, the
// new flow's next packet would start a third flow on a third port mid-stream.
func TestPrivilegedNodePortSNATReclaimKeepsNewFlow(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	stale := binary.BigEndian.Uint16(forwardedOut(t, d, req)[34:])
	fk := myelinNatKey{Saddr: networkUint32(mustAddr(extHost)), Daddr: networkUint32(testNodeIP), Sport: htons(40000),
		Dport: htons(nodePort), Proto: protoTCP, Dir: uint8(myelinNatDirNAT_DIR_EGRESS)}
	if err := d.objs.MyelinNodeportSyn.Delete(fk); err != nil {
		t.Fatal(err)
	}
	port := binary.BigEndian.Uint16(forwardedOut(t, d, req)[34:])
	rk := myelinNatKey{Saddr: networkUint32(mustAddr(remoteIP)), Daddr: networkUint32(testNodeIP), Sport: htons(8080),
		Dport: htons(stale), Proto: protoTCP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
	var rv myelinNpEntry
	if err := d.objs.MyelinNodeportSyn.Lookup(rk, &rv); err != nil {
		t.Fatal(err)
	}
	rv.LastSeen = uint64(MonotonicNow() - 10*time.Second)
	if err := d.objs.MyelinNodeportSyn.Update(rk, rv, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	third := req.withSrc(extHost, 40001)
	if got := binary.BigEndian.Uint16(forwardedOut(t, d, third)[34:]); got != stale {
		t.Fatalf("a third flow got NAT port %d, want the idle flow's %d", got, stale)
	}
	var fv myelinNpEntry
	if err := d.objs.MyelinNodeportSyn.Lookup(fk, &fv); err != nil || ntohs(fv.Xport) != port {
		t.Errorf("the new flow's forward entry after the reclaim: %+v (%v), want it on NAT port %d", fv, err, port)
	}
}

// With myelin_nodeport_nat full, a flow completing its handshake is dropped
// as DROP_NODEPORT_NAT_FULL (counted, with a drop event) and stays
// embryonic; once the GC made room, its next ACK promotes it.
func TestPrivilegedNodePortSNATFull(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 2, 0, testNATPort, testNATPort+1)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	run := func(p pkt) ([]byte, uint32) {
		out := make([]byte, 1500)
		ret, err := d.objs.MyelinFromNetdev.Run(&ebpf.RunOptions{Data: p.build(), DataOut: out})
		if err != nil {
			t.Fatal(err)
		}
		return out, ret
	}
	// An idle established flow of another client fills the table.
	other := req.withSrc("203.0.113.20", 40000)
	establish := func(client pkt) {
		out, _ := run(client)
		port := binary.BigEndian.Uint16(out[34:])
		run(ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, port).withTCPFlags(0x12).withSeq(7, 1))
		run(client.withTCPFlags(0x10).withSeq(1, 8))
	}
	establish(other)
	if fill, _ := d.MapFill(); fill[4].Name != "myelin_nodeport_nat" || fill[4].Entries != 2 {
		t.Fatalf("after one handshake: %+v, want myelin_nodeport_nat 2/2", fill)
	}
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, _ := run(req)
	port := binary.BigEndian.Uint16(out[34:])
	run(ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, port).withTCPFlags(0x12).withSeq(7, 1))
	ack := req.withTCPFlags(0x10).withSeq(1, 8)
	c := progCase{name: "promotion into a full table", endpoints: seedB, in: ack.build(), verdict: tcActShot, reason: "DROP_NODEPORT_NAT_FULL"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	ev, ok := readEvent(t, r, 1e9)
	if !ok || ev.Reason != "DROP_NODEPORT_NAT_FULL" || ev.Src != mustAddr(extHost) {
		t.Errorf("drop event %+v (%v), want DROP_NODEPORT_NAT_FULL of the client's ACK", ev, ok)
	}
	flows, _ := d.NodePortFlows()
	if len(flows) != 2 || !flows[0].Established || flows[0].Client != mustAddr("203.0.113.20") || flows[1].Established {
		t.Errorf("flows after the drop: %+v, want the other client's established and ours embryonic", flows)
	}
	if n, err := d.GCNodePortNAT(MonotonicNow() + NATTimeoutTCPEstablished + 2e9); err != nil || n != 2 {
		t.Fatalf("GC removed %d (%v), want 2", n, err)
	}
	c = progCase{name: "after GC", endpoints: seedB, in: ack.build(), verdict: tcActOK,
		out: ack.withSrc(nodeIP, port).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if flows, _ := d.NodePortFlows(); len(flows) != 1 || !flows[0].Established {
		t.Errorf("flows after GC and the ACK: %+v, want ours established", flows)
	}
}

// NodePort SNAT and masquerade never share a reverse tuple: with one NAT
// port, whichever flow holds it first, the other gets DROP_NAT_NO_PORT.
func TestPrivilegedNodePortSNATPortsDisjoint(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
	// A backend outside the cluster (a Service with manual Endpoints) is a
	// destination masquerade translates to as well.
	st := lbState{backends: map[uint32]Backend{3: {Addr: mustAddr(extHost), Port: 8080}},
		services: map[Frontend]Service{feNodePort: {ID: 1, Flags: ServiceNodePort, Backends: []uint32{3}}}}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	client := ipv4(protoTCP, "198.18.5.5", nodeIP).withDst(nodeIP, nodePort)
	pod := ipv4(protoTCP, "10.1.0.10", extHost)
	run := func(p *ebpf.Program, in pkt) {
		if _, err := p.Run(forwardedRun(d, p, in.build())); err != nil {
			t.Fatal(err)
		}
	}
	// The NodePort flow gets the port first; the masquerade flow finds it taken.
	run(d.objs.MyelinFromNetdev, client)
	c := progCase{name: "masquerade after NodePort", in: pod.build(), verdict: tcActShot, reason: "DROP_NAT_NO_PORT"}
	if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", c); err != nil {
		t.Error(err)
	}
	flows, _ := d.NodePortFlows()
	nat, _ := d.NATEntries()
	if len(flows) != 1 || flows[0].NATPort != testNATPort || len(nat) != 0 {
		t.Errorf("NodePort flows %+v, NAT flows %+v: want the NodePort flow alone on port %d", flows, nat, testNATPort)
	}
	// And the other way round.
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	run(d.objs.MyelinToNetdev, pod)
	c = progCase{name: "NodePort after masquerade", in: client.build(), verdict: tcActShot, reason: "DROP_NAT_NO_PORT"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	flows, _ = d.NodePortFlows()
	nat, _ = d.NATEntries()
	if len(flows) != 0 || len(nat) != 1 || nat[0].NATPort != testNATPort {
		t.Errorf("NodePort flows %+v, NAT flows %+v: want the masquerade flow alone on port %d", flows, nat, testNATPort)
	}
}

// A flood of SYNs from 3,000 forged sources to a NodePort only churns the
// embryonic LRU (64 entries): an established NodePort flow and a pod's
// masquerade flow keep their entries and ports, service conntrack stays
// empty, every flood packet is translated (LRU eviction or port reclaim,
// never a drop), and the counters show the churn.
func TestPrivilegedNodePortSNATFlood(t *testing.T) {
	requirePrivileged(t)
	natMin, natMax := testObjectNATPorts(t)
	d := loadNodePortNAT(t, 64, 64, 0, natMin, natMax)
	run := func(p *ebpf.Program, in pkt) []byte {
		opts := forwardedRun(d, p, in.build())
		ret, err := p.Run(opts)
		if err != nil || ret != tcActOK {
			t.Fatalf("run %v: verdict %d, %v", in, ret, err)
		}
		return opts.DataOut
	}
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	natPort := binary.BigEndian.Uint16(run(d.objs.MyelinFromNetdev, req)[34:])
	run(d.objs.MyelinFromNetdev, ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, natPort).withTCPFlags(0x12).withSeq(7, 1))
	run(d.objs.MyelinFromNetdev, req.withTCPFlags(0x10).withSeq(1, 8))
	masq := ipv4(protoUDP, "10.1.0.10", "198.51.100.53").withDst("198.51.100.53", 53)
	masqPort := binary.BigEndian.Uint16(run(d.objs.MyelinToNetdev, masq)[34:])

	const flood = 3000
	for i := 0; i < flood; i++ {
		src := netip.AddrFrom4([4]byte{198, 18, byte(100 + i/250), byte(1 + i%250)})
		syn := ipv4(protoTCP, src.String(), nodeIP).withSrc(src.String(), uint16(1024+i)).withDst(nodeIP, nodePort)
		if p := binary.BigEndian.Uint16(run(d.objs.MyelinFromNetdev, syn)[34:]); p < natMin {
			t.Fatalf("flood SYN %d got NAT port %d", i, p)
		}
	}
	data := req.withTCPFlags(0x18).withSeq(1, 8)
	c := progCase{name: "established flow after the flood", endpoints: seedB, in: data.build(), verdict: tcActOK,
		out: data.withSrc(nodeIP, natPort).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if p := binary.BigEndian.Uint16(run(d.objs.MyelinToNetdev, masq)[34:]); p != masqPort {
		t.Errorf("masquerade flow's port after the flood = %d, want %d", p, masqPort)
	}
	if err := checkEmpty(d.objs.MyelinLbCt); err != nil {
		t.Error(err)
	}
	fill, _ := d.MapFill()
	// The kernel's LRU evicts in batches from per-CPU free lists, so how full it reads
	// after the flood depends on the CPUs the test ran on; it holds flood entries and
	// never more than its size, and the established table exactly its 2.
	if fill[3].Entries == 0 || fill[3].Entries > 64 || fill[4].Entries != 2 {
		t.Errorf("fill after the flood: %+v, want the embryonic LRU holding flood entries (at most 64) and the 2 established", fill)
	}
	st, _ := d.NodePortStats()
	if st.Created != flood+1 || st.Promoted != 1 {
		t.Errorf("NodePort stats %+v, want %d created, 1 promoted", st, flood+1)
	}
	if m, _ := counter(d, "from-netdev", "DROP_NODEPORT_NAT_FULL"); m.Packets != 0 {
		t.Errorf("DROP_NODEPORT_NAT_FULL = %d during a SYN flood, want 0", m.Packets)
	}
}

// udpNodePort serves the UDP NodePort of feNodePort's address and port from
// the remote backend 2, and returns a client's datagram to it.
func udpNodePort(t *testing.T, d *Datapath) pkt {
	t.Helper()
	fe := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	if err := seedLB(d, *oneService(fe, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}})); err != nil {
		t.Fatal(err)
	}
	return ipv4(protoUDP, extHost, nodeIP).withDst(nodeIP, nodePort)
}

// npUDPFlow is the UDP NodePortFlow of extHost:40000 on testNATPort.
func npUDPFlow(established bool) NodePortFlow {
	f := npTestFlow(extHost, 40000, remoteIP, 2, established, "udp")
	f.Proto = protoUDP
	return f
}

// UDP NodePort flows to a remote backend: embryonic on the first datagram,
// moved by the client's next datagram after a reply came back into the LRU
// myelin_nodeport_udp, never into myelin_nodeport_nat (TCP's, which answered
// datagrams from forged sources must not fill); replies and ICMP errors find
// the flow there, and GCNodePortNAT collects it once idle.
func TestPrivilegedNodePortSNATUDP(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
	req := udpNodePort(t, d)
	reply := ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort)
	toBackend := func(p pkt) []byte { return p.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).build() }
	toClient := func(p pkt) []byte { return p.withSrc(nodeIP, nodePort).withDst(extHost, 40000).build() }
	unreachable := func(from, to string) pkt {
		q := quote(req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080))
		if to == extHost {
			q = frontQuote(restoredQuote(q, mustAddr(extHost), 40000), testNodeIP, nodePort)
		}
		return ipv4(protoICMP, from, to).withICMPError(3, 3, 0, q)
	}
	embryonic := func(d *Datapath) error { return checkNodePortFlows(d, []NodePortFlow{npUDPFlow(false)}) }
	answered := func(d *Datapath) error {
		if err := checkNodePortFlows(d, []NodePortFlow{npUDPFlow(true)}); err != nil {
			return err
		}
		if n, err := countEntries(d.objs.MyelinNodeportUdp); err != nil || n != 2 {
			return fmt.Errorf("myelin_nodeport_udp holds %d entries (%v), want the flow's 2", n, err)
		}
		if err := checkEmpty(d.objs.MyelinNodeportNat); err != nil {
			return err
		}
		return checkEmpty(d.objs.MyelinNodeportSyn)
	}
	row := func(name string, in pkt, out []byte, then func(*Datapath) error) lbCase {
		return lbCase{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: then,
			progCase: progCase{name: name, endpoints: seedB, in: in.build(), verdict: tcActOK, out: out, reason: "PASS_STACK"}}
	}
	runLBCases(t, d, []lbCase{
		row("first datagram: embryonic", req, toBackend(req), embryonic),
		row("reply: from the NodePort", reply, toClient(reply), embryonic),
		row("next datagram: answered, in myelin_nodeport_udp", req, toBackend(req), answered),
		row("datagram: same NAT port", req, toBackend(req), answered),
		row("reply: from the NodePort", reply, toClient(reply), answered),
		row("backend's port unreachable: back to the client from the NodePort",
			unreachable(remoteIP, nodeIP), unreachable(nodeIP, extHost).build(), answered),
	})
	if err := checkNodePortStats(d, NodePortStats{Created: 1, UDPAnswered: 1}); err != nil {
		t.Error(err)
	}
	if n, err := d.GCNodePortNAT(MonotonicNow()); err != nil || n != 0 {
		t.Errorf("GCNodePortNAT of a fresh flow removed %d (%v), want 0", n, err)
	}
	if n, err := d.GCNodePortNAT(MonotonicNow() + NATTimeoutUDP + 2e9); err != nil || n != 2 {
		t.Errorf("GCNodePortNAT of an idle UDP flow removed %d (%v), want 2", n, err)
	}
}

// A UDP flow an older version moved to myelin_nodeport_nat keeps its NAT
// port after an upgrade: its datagrams and replies are translated without
// creating a flow, there and once GCNodePortNAT moved it to
// myelin_nodeport_udp (where a flood can't keep it from the GC).
func TestPrivilegedNodePortSNATUDPInOldTable(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	req := udpNodePort(t, d).withSrc(extHost, 40000)
	now := uint64(MonotonicNow())
	fk := myelinNatKey{Saddr: networkUint32(mustAddr(extHost)), Daddr: networkUint32(testNodeIP), Sport: htons(40000),
		Dport: htons(nodePort), Proto: protoUDP, Dir: uint8(myelinNatDirNAT_DIR_EGRESS)}
	fv := myelinNpEntry{LastSeen: now, Addr: networkUint32(mustAddr(remoteIP)), BackendId: 2, Port: htons(8080),
		Xport: htons(testNATPort + 1), Flags: uint16(myelinNatFlagsNAT_F_REPLIED)}
	rk := myelinNatKey{Saddr: fv.Addr, Daddr: fk.Daddr, Sport: fv.Port, Dport: fv.Xport, Proto: protoUDP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
	rv := myelinNpEntry{LastSeen: now, Addr: fk.Saddr, Port: fk.Sport, Xport: fk.Dport, Flags: fv.Flags}
	for _, e := range []struct {
		k myelinNatKey
		v myelinNpEntry
	}{{fk, fv}, {rk, rv}} {
		if err := d.objs.MyelinNodeportNat.Update(e.k, e.v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	reply := ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort+1)
	translated := func(where string) {
		for _, c := range []struct {
			in, out pkt
			name    string
		}{
			{req, req.withSrc(nodeIP, testNATPort+1).withDst(remoteIP, 8080), "datagram"},
			{reply, reply.withSrc(nodeIP, nodePort).withDst(extHost, 40000), "reply"},
		} {
			pc := progCase{name: c.name + " " + where, endpoints: seedB, in: c.in.build(), verdict: tcActOK, out: c.out.build(), reason: "PASS_STACK"}
			if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", pc); err != nil {
				t.Error(err)
			}
		}
	}
	translated("in myelin_nodeport_nat")
	if n, err := d.GCNodePortNAT(MonotonicNow()); err != nil || n != 0 {
		t.Fatalf("GCNodePortNAT removed %d (%v), want the fresh flow moved, not removed", n, err)
	}
	if err := checkEmpty(d.objs.MyelinNodeportNat); err != nil {
		t.Error(err)
	}
	if n, err := countEntries(d.objs.MyelinNodeportUdp); err != nil || n != 2 {
		t.Errorf("myelin_nodeport_udp holds %d entries (%v), want the moved flow's 2", n, err)
	}
	translated("moved to myelin_nodeport_udp")
	if st, _ := d.NodePortStats(); st.Created != 0 {
		t.Errorf("NodePort stats %+v, want no flow created", st)
	}
}

// A load deletes the flows of myelin_nodeport_udp whose reverse tuple
// myelin_nodeport_nat holds too (an older version ran since, a downgrade
// then this upgrade, and gave their ports to flows of its own) and keeps
// the others. A datapath OpenPinned adopted (the older programs still run)
// leaves the old flows where those programs look for them; the loaded
// one's GC moves them.
func TestPrivilegedNodePortSNATUDPStaleAfterDowngrade(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	now := uint64(MonotonicNow())
	entry := func(client string, natPort uint16) (myelinNatKey, myelinNpEntry) {
		return myelinNatKey{Saddr: networkUint32(mustAddr(remoteIP)), Daddr: networkUint32(testNodeIP), Sport: htons(8080),
				Dport: htons(natPort), Proto: protoUDP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)},
			myelinNpEntry{LastSeen: now, Addr: networkUint32(mustAddr(client)), Port: htons(5555), Xport: htons(nodePort)}
	}
	stale, staleV := entry("203.0.113.20", testNATPort)
	if err := d.objs.MyelinNodeportUdp.Update(stale, staleV, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	reload := func() *Datapath {
		cfg := d.cfg
		again, err := Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { again.Close() })
		return again
	}
	if n, err := countEntries(reload().objs.MyelinNodeportUdp); err != nil || n != 1 {
		t.Errorf("a reload without old UDP flows: myelin_nodeport_udp holds %d (%v), want its 1", n, err)
	}
	kept, keptV := entry("203.0.113.40", testNATPort+1)
	if err := d.objs.MyelinNodeportUdp.Update(kept, keptV, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	old, oldV := entry("203.0.113.30", testNATPort)
	if err := d.objs.MyelinNodeportNat.Update(old, oldV, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	adopted, err := OpenPinned(d.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer adopted.Close()
	if _, err := adopted.GCNodePortNAT(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	if n, err := countEntries(d.objs.MyelinNodeportNat); err != nil || n != 1 {
		t.Errorf("after an adopted datapath's GC: myelin_nodeport_nat holds %d (%v), want the old flow's entry", n, err)
	}
	again := reload()
	var got myelinNpEntry
	if err := again.objs.MyelinNodeportUdp.Lookup(kept, &got); err != nil || got != keptV {
		t.Errorf("a flow of myelin_nodeport_udp no other table holds: %+v (%v), want it kept", got, err)
	}
	if n, err := countEntries(again.objs.MyelinNodeportUdp); err != nil || n != 1 {
		t.Errorf("myelin_nodeport_udp holds %d (%v) after the reload, want the stale flow deleted", n, err)
	}
	if _, err := again.GCNodePortNAT(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	if err := again.objs.MyelinNodeportUdp.Lookup(old, &got); err != nil || got != oldV {
		t.Errorf("the old flow after the loaded datapath's GC: %+v (%v), want it moved to myelin_nodeport_udp", got, err)
	}
}

// An answered UDP flow whose reverse entry the LRU evicted alone is
// forgotten at its next datagram, which starts a new flow: had another
// flow taken the port meanwhile, the two would otherwise share the
// backend's replies. With the one NAT port held by another client's
// answered flow, the datagram finds no port; once that flow is gone, it
// starts an embryonic flow on the port.
func TestPrivilegedNodePortSNATUDPHalfEvicted(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
	req := udpNodePort(t, d)
	reply := ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort)
	for _, p := range []pkt{req, reply, req} {
		if ret, err := d.objs.MyelinFromNetdev.Run(forwardedRun(d, d.objs.MyelinFromNetdev, p.build())); err != nil || ret != tcActOK {
			t.Fatalf("answering the flow: verdict %d, %v", ret, err)
		}
	}
	if err := checkNodePortFlows(d, []NodePortFlow{npUDPFlow(true)}); err != nil {
		t.Fatal(err)
	}
	rk := myelinNatKey{Saddr: networkUint32(mustAddr(remoteIP)), Daddr: networkUint32(testNodeIP), Sport: htons(8080),
		Dport: htons(testNATPort), Proto: protoUDP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
	other := myelinNpEntry{LastSeen: uint64(MonotonicNow()), Addr: networkUint32(mustAddr("203.0.113.20")), Port: htons(5555),
		Xport: htons(nodePort), Flags: uint16(myelinNatFlagsNAT_F_REPLIED)}
	if err := d.objs.MyelinNodeportUdp.Update(rk, other, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	c := progCase{name: "datagram of the flow whose port another flow holds", endpoints: seedB, in: req.build(),
		verdict: tcActShot, reason: "DROP_NAT_NO_PORT"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if n, err := countEntries(d.objs.MyelinNodeportUdp); err != nil || n != 1 {
		t.Errorf("myelin_nodeport_udp holds %d entries (%v), want the other flow's reverse entry alone", n, err)
	}
	if err := d.objs.MyelinNodeportUdp.Delete(rk); err != nil {
		t.Fatal(err)
	}
	c = progCase{name: "datagram once the port is free", endpoints: seedB, in: req.build(), verdict: tcActOK,
		out: req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if err := checkNodePortFlows(d, []NodePortFlow{npUDPFlow(false)}); err != nil {
		t.Error(err)
	}
}

// An embryonic flow whose backend id names another backend now is
// forgotten before its packet could move it past its handshake: the
// datagram after a reply starts a flow to the new backend instead of moving
// the old one into myelin_nodeport_udp, where nothing would remove it (its
// NAT port held until the GC).
func TestPrivilegedNodePortSNATUDPBackendGoneEmbryonic(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	req := udpNodePort(t, d)
	first := binary.BigEndian.Uint16(forwardedOut(t, d, req)[34:])
	reply := ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, first)
	forwardedOut(t, d, reply)
	moved := "10.2.0.44"
	if err := d.UpsertBackend(2, Backend{Addr: mustAddr(moved), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	out := forwardedOut(t, d, req)
	if got := netip.AddrFrom4([4]byte(out[30:34])); got != mustAddr(moved) {
		t.Errorf("datagram after the backend moved went to %v, want %s", got, moved)
	}
	if err := checkEmpty(d.objs.MyelinNodeportUdp); err != nil {
		t.Error(err)
	}
	flows, err := d.NodePortFlows()
	if err != nil || len(flows) != 1 || flows[0].Established || flows[0].Backend != mustAddr(moved) {
		t.Errorf("NodePort flows %+v (%v), want one embryonic flow to %s", flows, err, moved)
	}
}

// Forgetting an embryonic flow whose backend moved leaves its reverse
// tuple alone when another flow holds it now (the LRU evicted the flow's
// own reverse entry and the port went to that flow).
func TestPrivilegedNodePortSNATForgetKeepsOthers(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort+1)
	req := udpNodePort(t, d)
	port := binary.BigEndian.Uint16(forwardedOut(t, d, req)[34:])
	rk := myelinNatKey{Saddr: networkUint32(mustAddr(remoteIP)), Daddr: networkUint32(testNodeIP), Sport: htons(8080),
		Dport: htons(port), Proto: protoUDP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
	other := myelinNpEntry{LastSeen: uint64(MonotonicNow()), Addr: networkUint32(mustAddr("203.0.113.20")), Port: htons(5555),
		Xport: htons(nodePort)}
	if err := d.objs.MyelinNodeportSyn.Update(rk, other, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertBackend(2, Backend{Addr: mustAddr("10.2.0.44"), Port: 8080}); err != nil {
		t.Fatal(err)
	}
	forwardedOut(t, d, req)
	var got myelinNpEntry
	if err := d.objs.MyelinNodeportSyn.Lookup(rk, &got); err != nil || got != other {
		t.Errorf("the other flow's reverse entry after forgetting ours: %+v (%v), want %+v", got, err, other)
	}
}

// forwardedOut runs p through myelin_from_netdev, which must pass it on,
// and returns what it made of it.
func forwardedOut(t *testing.T, d *Datapath, p pkt) []byte {
	t.Helper()
	opts := forwardedRun(d, d.objs.MyelinFromNetdev, p.build())
	if ret, err := d.objs.MyelinFromNetdev.Run(opts); err != nil || ret != tcActOK {
		t.Fatalf("run %v: verdict %d, %v", p, ret, err)
	}
	return opts.DataOut
}

// A flood of answered UDP flows from 3,000 forged sources (each sends a
// datagram, gets the backend's reply and sends again, as a sender of forged
// sources gets from any backend that answers every datagram) churns the
// LRU myelin_nodeport_udp (64 entries) only: myelin_nodeport_nat (16
// entries, TCP's) keeps its established flow alone, so that flow forwards
// and a TCP handshake after the flood completes; every flood datagram is
// translated (no DROP_NODEPORT_NAT_FULL) and a pod's masquerade flow keeps
// its port.
func TestPrivilegedNodePortSNATUDPFlood(t *testing.T) {
	requirePrivileged(t)
	natMin, natMax := testObjectNATPorts(t)
	d := loadNodePortNAT(t, 64, 16, 64, natMin, natMax)
	udp := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	st := lbState{backends: map[uint32]Backend{2: {Addr: mustAddr(remoteIP), Port: 8080}},
		services: map[Frontend]Service{feNodePort: {ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}},
			udp: {ID: 2, Flags: ServiceNodePort, Backends: []uint32{2}}}}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	run := func(p *ebpf.Program, in pkt) ([]byte, uint32) {
		opts := forwardedRun(d, p, in.build())
		ret, err := p.Run(opts)
		if err != nil {
			t.Fatalf("run %v: %v", in, err)
		}
		return opts.DataOut, ret
	}
	handshake := func(client pkt) uint16 {
		out, _ := run(d.objs.MyelinFromNetdev, client)
		port := binary.BigEndian.Uint16(out[34:])
		run(d.objs.MyelinFromNetdev, ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, port).withTCPFlags(0x12).withSeq(7, 1))
		if _, ret := run(d.objs.MyelinFromNetdev, client.withTCPFlags(0x10).withSeq(1, 8)); ret != tcActOK {
			t.Errorf("ACK of %v: verdict %d, want forwarded", client, ret)
		}
		return port
	}
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	natPort := handshake(req)
	masq := ipv4(protoUDP, "10.1.0.10", "198.51.100.53").withDst("198.51.100.53", 53)
	masqOut, _ := run(d.objs.MyelinToNetdev, masq)
	masqPort := binary.BigEndian.Uint16(masqOut[34:])

	const flood = 3000
	dropped := 0
	for i := 0; i < flood; i++ {
		src := netip.AddrFrom4([4]byte{198, 18, byte(100 + i/250), byte(1 + i%250)})
		dgram := ipv4(protoUDP, src.String(), nodeIP).withSrc(src.String(), uint16(1024+i)).withDst(nodeIP, nodePort)
		out, ret := run(d.objs.MyelinFromNetdev, dgram)
		port := binary.BigEndian.Uint16(out[34:])
		run(d.objs.MyelinFromNetdev, ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, port))
		if _, ret2 := run(d.objs.MyelinFromNetdev, dgram); ret != tcActOK || ret2 != tcActOK {
			dropped++
		}
	}
	if dropped != 0 {
		t.Errorf("%d of %d flood flows had a datagram dropped, want none", dropped, flood)
	}
	data := req.withTCPFlags(0x18).withSeq(1, 8)
	c := progCase{name: "established TCP flow after the flood", endpoints: seedB, in: data.build(), verdict: tcActOK,
		out: data.withSrc(nodeIP, natPort).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	handshake(req.withSrc("203.0.113.20", 40001))
	if n, err := countEntries(d.objs.MyelinNodeportNat); err != nil || n != 4 {
		t.Errorf("myelin_nodeport_nat holds %d entries (%v), want the two TCP flows' 4", n, err)
	}
	if n, err := countEntries(d.objs.MyelinNodeportUdp); err != nil || n == 0 || n > 64 {
		t.Errorf("myelin_nodeport_udp holds %d entries (%v), want flood flows, at most 64", n, err)
	}
	if out, _ := run(d.objs.MyelinToNetdev, masq); binary.BigEndian.Uint16(out[34:]) != masqPort {
		t.Errorf("masquerade flow's port after the flood = %d, want %d", binary.BigEndian.Uint16(out[34:]), masqPort)
	}
	if st, _ := d.NodePortStats(); st.Promoted != 2 || st.UDPAnswered != flood {
		t.Errorf("NodePort stats %+v, want 2 TCP promoted and %d UDP answered", st, flood)
	}
	if m, _ := counter(d, "from-netdev", "DROP_NODEPORT_NAT_FULL"); m.Packets != 0 {
		t.Errorf("DROP_NODEPORT_NAT_FULL = %d during a UDP flood, want 0", m.Packets)
	}
}

// An embryonic flow holding the only NAT port gives it up to a new flow once
// idle 5 s (not before: DROP_NAT_NO_PORT); a pod's reply to a NAT port of no
// flow passes untouched and counts as a reply lost.
func TestPrivilegedNodePortSNATReclaim(t *testing.T) {
	requirePrivileged(t)
	d := loadNodePortNAT(t, 0, 0, 0, testNATPort, testNATPort)
	seed := func(age time.Duration) {
		if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}})); err != nil {
			t.Fatal(err)
		}
		last := uint64(MonotonicNow() - age)
		fk := myelinNatKey{Saddr: networkUint32(mustAddr("203.0.113.20")), Daddr: networkUint32(testNodeIP), Sport: htons(1111),
			Dport: htons(nodePort), Proto: protoTCP, Dir: uint8(myelinNatDirNAT_DIR_EGRESS)}
		fv := myelinNpEntry{LastSeen: last, Addr: networkUint32(mustAddr(remoteIP)), BackendId: 2, Port: htons(8080), Xport: htons(testNATPort)}
		rk := myelinNatKey{Saddr: fv.Addr, Daddr: fk.Daddr, Sport: fv.Port, Dport: fv.Xport, Proto: protoTCP, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
		rv := myelinNpEntry{LastSeen: last, Addr: fk.Saddr, Port: fk.Sport, Xport: fk.Dport}
		for _, e := range []struct {
			k myelinNatKey
			v myelinNpEntry
		}{{fk, fv}, {rk, rv}} {
			if err := d.objs.MyelinNodeportSyn.Update(e.k, e.v, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
		}
	}
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	// A stamp ahead of the programs' clock read (bpf/lib/clock.h) is fresh too.
	for _, age := range []time.Duration{time.Second, -time.Hour} {
		seed(age)
		c := progCase{name: fmt.Sprintf("port held by a fresh embryonic flow (age %v)", age), endpoints: seedB,
			in: req.build(), verdict: tcActShot, reason: "DROP_NAT_NO_PORT"}
		if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
			t.Error(err)
		}
	}
	seed(6 * time.Second)
	c := progCase{name: "port held by an idle embryonic flow", endpoints: seedB, in: req.build(), verdict: tcActOK,
		out: req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if err := checkNodePortFlows(d, []NodePortFlow{npTestFlow(extHost, 40000, remoteIP, 2, false, "tcp-syn")}); err != nil {
		t.Error(err)
	}
	lost := ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort+0).withTCPFlags(0x12).withSeq(5, 1)
	if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}})); err != nil {
		t.Fatal(err)
	}
	c = progCase{name: "reply without a flow", endpoints: seedB, in: lost.build(), verdict: tcActOK, reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinFromNetdev, "from-netdev", c); err != nil {
		t.Error(err)
	}
	if st, _ := d.NodePortStats(); st.RepliesLost != 1 || st.Created != 1 {
		t.Errorf("NodePort stats %+v, want 1 created and 1 reply lost", st)
	}
}
