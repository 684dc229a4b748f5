package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
)

// fragPayload makes a UDP datagram long enough for two fragments.
var fragPayload = bytes.Repeat([]byte("myelin fragment "), 6) // 96 bytes

// fragFirstLen is the L4 bytes of a first fragment: the UDP header and 40 bytes.
const fragFirstLen = 48

// fragments renders p as the two fragments of one datagram with IPv4 id id:
// the first (MF set) carries the L4 header with its checksum over the whole
// datagram and the first fragFirstLen bytes, the later one the rest.
func (p pkt) fragments(id uint16) (first, later []byte) {
	l4 := p.l4()
	return p.fragment(id, 0, true, l4[:fragFirstLen]), p.fragment(id, fragFirstLen, false, l4[fragFirstLen:])
}

// fragment renders one fragment of p: data at byte offset off of the L4 message.
func (p pkt) fragment(id uint16, off int, more bool, data []byte) []byte {
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(data)))
	binary.BigEndian.PutUint16(ip[4:], id)
	flags := uint16(off / 8)
	if more {
		flags |= 0x2000
	}
	binary.BigEndian.PutUint16(ip[6:], flags)
	ip[8], ip[9] = p.ttl, p.proto
	copy(ip[12:16], p.src.AsSlice())
	copy(ip[16:20], p.dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	return append(ethernet(p.dstMAC, p.srcMAC, etherTypeIPv4), append(ip, data...)...)
}

// deliveredFrags is fragments of p as they must leave towards pod B.
func deliveredFrags(p pkt, id uint16) (first, later []byte) {
	return p.withMACs(hostBMAC, podBMAC).withTTL(p.ttl - 1).fragments(id)
}

// fragCount requires myelin_frags to hold n entries.
func fragCount(n int) func(*Datapath) error {
	return func(d *Datapath) error {
		got, err := countEntries(d.objs.MyelinFrags)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("myelin_frags holds %d entries, want %d", got, n)
		}
		return nil
	}
}

// A UDP datagram to a ClusterIP in two fragments: both go to the backend,
// and the backend's fragmented reply comes back from the ClusterIP, through
// endpoint_deliver and through myelin_to_pod. Whole datagrams record nothing.
func TestPrivilegedLBFragments(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod

	req := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	req.payload = fragPayload
	first, later := req.fragments(0x4242)
	dnatFirst, dnatLater := deliveredFrags(req.withDst(podBIP, 8080), 0x4242)
	_, orphan := req.fragments(0x4343)

	reply := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40000)
	reply.payload = fragPayload
	// Pod B sends the reply on its veth; pod A gets pod B's veth fixture, so deliveredFrags() fits it.
	rFirst, rLater := fromPodB(reply).fragments(0x5151)
	seedReply := map[string]EndpointInfo{podA: podB, podBIP: podB}
	backFirst, backLater := deliveredFrags(reply.withSrc(vip, 53), 0x5151)
	sFirst, sLater := reply.fragments(0x6161) // delivered by the stack
	sBackFirst, sBackLater := reply.withSrc(vip, 53).fragments(0x6161)
	// A direct reply on other ports reusing id 0x6161: its first fragment clears the entry.
	direct := reply.withSrc(podBIP, 9999)
	dFirst, dLater := direct.fragments(0x6161)

	whole := req.withSrc(podA, 40001)
	cases := []lbCase{
		{seed: oneService(feUDP, Service{ID: 3, Backends: []uint32{1}}), prog: fromPod, dir: "from-pod", then: fragCount(0), progCase: progCase{
			name: "whole datagram: DNAT, nothing recorded", endpoints: seedB, in: whole.build(), verdict: tcActRedirect,
			out: delivered(whole.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: fragCount(1), progCase: progCase{
			name: "first fragment: DNAT to the backend", endpoints: seedB, in: first, verdict: tcActRedirect, out: dnatFirst, reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{
			name: "later fragment: the same backend", endpoints: seedB, in: later, verdict: tcActRedirect, out: dnatLater, reason: "FORWARDED"}},
		// No test-run context: the FIB lookup fails and the stack gets it, untouched.
		{prog: fromPod, dir: "from-pod", progCase: progCase{
			name: "later fragment without its first: untouched", endpoints: seedB, in: orphan, verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", then: fragCount(2), progCase: progCase{
			name: "reply first fragment: from the ClusterIP", endpoints: seedReply, in: rFirst, verdict: tcActRedirect, out: backFirst, reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{
			name: "reply later fragment: from the ClusterIP", endpoints: seedReply, in: rLater, verdict: tcActRedirect, out: backLater, reason: "FORWARDED"}},
		{prog: toPod, dir: "to-pod", then: fragCount(3), progCase: progCase{
			name: "reply first fragment delivered by the stack", in: sFirst, verdict: tcActOK, out: sBackFirst, reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{
			name: "reply later fragment delivered by the stack", in: sLater, verdict: tcActOK, out: sBackLater, reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", then: fragCount(2), progCase: progCase{
			name: "untranslated first fragment with a reused id clears the entry", in: dFirst, verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{
			name: "so its later fragment stays untranslated", in: dLater, verdict: tcActOK, reason: "PASS_STACK"}},
	}
	for _, f := range [][]byte{dnatFirst, backFirst, sBackFirst} {
		if !datagramChecksumValid(f, [][]byte{dnatLater, backLater, sBackLater}) {
			t.Fatalf("fixture %x: the UDP checksum does not cover the datagram", f)
		}
	}
	runLBCases(t, d, cases)
}

// datagramChecksumValid reports whether the UDP checksum in first verifies
// over the datagram made of first and one of the later fragments (same id).
func datagramChecksumValid(first []byte, laters [][]byte) bool {
	for _, l := range laters {
		if !bytes.Equal(first[18:20], l[18:20]) {
			continue
		}
		whole := append(append([]byte(nil), first...), l[34:]...)
		binary.BigEndian.PutUint16(whole[16:], uint16(len(whole)-14))
		whole[20], whole[21] = 0, 0
		return l4ChecksumValid(whole)
	}
	return false
}

// With two backends picked at random, every datagram's later fragment goes
// where its first went.
func TestPrivilegedLBFragmentsFollowTheirFirst(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedLB(d, *oneService(feUDP, Service{ID: 3, Backends: []uint32{1, 2}})); err != nil {
		t.Fatal(err)
	}
	// Pod A sends from its own veth.
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	req := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	req.payload = fragPayload
	seen := map[string]bool{}
	for i := range 32 {
		// Each datagram from another port: a new flow, a new random pick.
		first, later := req.withSrc(podA, uint16(41000+i)).fragments(uint16(0x7000 + i))
		_, outFirst, err := runPacket(d.objs.MyelinFromPod, first, ctxPodA)
		if err != nil {
			t.Fatal(err)
		}
		_, outLater, err := runPacket(d.objs.MyelinFromPod, later, ctxPodA)
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := dstOf(outFirst)
		if got := netip.AddrFrom4([4]byte(outLater[30:34])); got != dst {
			t.Errorf("datagram %d: first fragment to %v, later fragment to %v", i, dst, got)
		}
		if !ipv4HeaderValid(outLater) {
			t.Errorf("datagram %d: later fragment's IPv4 checksum invalid", i)
		}
		seen[dst.String()] = true
	}
	if !seen[podBIP] || !seen[remoteIP] {
		t.Errorf("32 flows went only to %v: want both backends picked", seen)
	}
}

// A masqueraded UDP datagram in two fragments leaves with the node's
// address on both; its fragmented reply comes back to the pod on both; a
// later fragment whose first was not seen is dropped, not leaked with the
// pod's address.
func TestPrivilegedMasqFragments(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 0)
	udp := ipv4(protoUDP, podA, extHost)
	udp.payload = fragPayload
	first, later := udp.fragments(0x4444)
	snatFirst, snatLater := udp.withSrc(nodeIP, testNATPort).fragments(0x4444)
	_, orphan := udp.fragments(0x4545)
	udpFlow := flow(protoUDP, podA, 40000, testNATPort, extHost, 8080, "udp")

	reply := ipv4(protoUDP, extHost, nodeIP).withSrc(extHost, 8080).withDst(nodeIP, testNATPort)
	reply.payload = fragPayload
	rFirst, rLater := reply.fragments(0x4646)
	backFirst, backLater := reply.withDst(podA, 40000).withMACs(hostBMAC, podBMAC).withTTL(63).fragments(0x4646)
	_, ownLater := reply.fragments(0x4747)

	out := func(name string, in, want []byte, verdict uint32, reason string) natCase {
		return natCase{progCase: progCase{name: name, endpoints: seedA, in: in, verdict: verdict, out: want, reason: reason},
			seed: []NATEntry{udpFlow}}
	}
	runNATCases(t, d, d.objs.MyelinToNetdev, "to-netdev", []natCase{
		{progCase: progCase{name: "first fragment: SNAT", in: first, verdict: tcActOK, out: snatFirst, reason: "PASS_STACK"},
			want: []NATEntry{udpFlow}},
		out("later fragment: SNAT", later, snatLater, tcActOK, "PASS_STACK"),
		out("later fragment without its first: dropped", orphan, nil, tcActShot, "DROP_FRAG_NO_FLOW"),
	})
	runNATCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", []natCase{
		out("reply first fragment: back to the pod", rFirst, backFirst, tcActRedirect, "FORWARDED"),
		out("reply later fragment: back to the pod", rLater, backLater, tcActRedirect, "FORWARDED"),
		out("later fragment to the node without its first: the node's own", ownLater, nil, tcActOK, "PASS_STACK"),
	})
	if !datagramChecksumValid(snatFirst, [][]byte{snatLater}) || !datagramChecksumValid(backFirst, [][]byte{backLater}) {
		t.Fatal("fixtures: the UDP checksum does not cover the datagram")
	}
}

// A fragmented UDP datagram to a NodePort: both fragments to the local
// backend, or both DNATed and SNATed to the remote one (and, like the first,
// sent on by the FIB, which without a test-run context hands them to the stack).
func TestPrivilegedLBFragmentsNodePort(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fe := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	to := func(id uint32) *lbState {
		return oneService(fe, Service{ID: 4, Flags: ServiceNodePort, Backends: []uint32{id}})
	}
	req := ipv4(protoUDP, extHost, nodeIP).withDst(nodeIP, nodePort)
	req.payload = fragPayload
	first, later := req.fragments(0x3131)
	localFirst, localLater := deliveredFrags(req.withDst(podBIP, 8080), 0x3131)
	rFirst, rLater := req.fragments(0x3232)
	remoteFirst, remoteLater := req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).fragments(0x3232)
	fromNetdev := d.objs.MyelinFromNetdev
	runLBCases(t, d, []lbCase{
		{seed: to(1), prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "local backend: first fragment",
			endpoints: seedB, in: first, verdict: tcActRedirect, out: localFirst, reason: "FORWARDED"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "local backend: later fragment",
			endpoints: seedB, in: later, verdict: tcActRedirect, out: localLater, reason: "FORWARDED"}},
		{seed: to(2), prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "remote backend: first fragment",
			endpoints: seedB, in: rFirst, verdict: tcActOK, out: remoteFirst, reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "remote backend: later fragment",
			endpoints: seedB, in: rLater, verdict: tcActOK, out: remoteLater, reason: "PASS_STACK"}},
	})
	if !datagramChecksumValid(localFirst, [][]byte{localLater}) || !datagramChecksumValid(remoteFirst, [][]byte{remoteLater}) {
		t.Fatal("fixtures: the UDP checksum does not cover the datagram")
	}
}
