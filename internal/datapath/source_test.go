package datapath

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
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

// ctxForwarded is the context of a packet the stack forwards to an egress
// program: received on a device (ifindex 2 stands for the uplink), not built
// by the node itself.
var ctxForwarded = &skbCtx{IngressIfindex: 2}

// withForwarder gives a to-pod or to-netdev row without a context whose
// source is a pod address ctxForwarded: such a packet came in on some device
// (a pod's veth, the uplink). With ingress_ifindex 0 the node's own stack
// would have built it from a pod's address, which host_source_check drops;
// rows about that set their context.
func withForwarder(c progCase) progCase {
	if src, ok := frameSource(c.in); ok && testClusterCIDR.Contains(src) {
		c.ctx = ctxForwarded
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

// arpFrame is an Ethernet/IPv4 ARP request: Ethernet source ethSrc, sender
// hardware address sha, sender protocol address spa, asking for 169.254.1.1.
func arpFrame(ethSrc, sha string, spa netip.Addr) []byte {
	b := arpRequest()
	copy(b[6:12], mac(ethSrc))
	copy(b[22:28], mac(sha))
	copy(b[28:32], spa.AsSlice())
	return b
}

// routerAdvertisement is an ICMPv6 router advertisement (RFC 4861) from a
// link-local address to all nodes, as a pod would plant a default route
// with: router lifetime 1800 s.
func routerAdvertisement() []byte {
	b := ethernet(mac("33:33:00:00:00:01"), podAMAC, etherTypeIPv6)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 16) // payload length
	ip[6], ip[7] = 58, 255                 // ICMPv6, hop limit 255
	copy(ip[8:24], netip.MustParseAddr("fe80::aa:ff:fe00:1").AsSlice())
	copy(ip[24:40], netip.MustParseAddr("ff02::1").AsSlice())
	ra := make([]byte, 16)
	ra[0], ra[4] = 134, 64 // type RA, current hop limit
	binary.BigEndian.PutUint16(ra[6:], 1800)
	return append(append(b, ip...), ra...)
}

// sourceCases are the source validation rows of from_pod: valid is the
// verdict, output and reason of pod A's own packet to pod B.
func sourceCases(valid progCase) []progCase {
	udp := ipv4(protoUDP, podA, podBIP)
	tcp := ipv4(protoTCP, podA, podBIP)
	spoofed := func(name string, in []byte, ctx *skbCtx) progCase {
		return progCase{name: name, endpoints: seedAB, in: in, ctx: ctx, verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}
	}
	unsupported := func(name string, in []byte) progCase {
		return progCase{name: name, endpoints: seedAB, in: in, ctx: ctxPodA, verdict: tcActShot, reason: "DROP_UNSUPPORTED_L3"}
	}
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	vlan := mutate(udp.build(), func(b []byte) []byte {
		return append(append(b[:12:12], 0x81, 0x00, 0x00, 0x05), b[12:]...) // 802.1Q tag, VLAN 5
	})
	return []progCase{
		valid,
		spoofed("UDP from pod B's address", udp.withSrc(podBIP, 40000).withDst(podA, 8080).build(), ctxPodA),
		spoofed("TCP from pod B's address", tcp.withSrc(podBIP, 40000).withDst(podA, 8080).build(), ctxPodA),
		spoofed("pod B's address and MAC on pod A's veth", fromPodB(udp.withSrc(podBIP, 40000)).build(), ctxPodA),
		spoofed("a remote pod's address", udp.withSrc(remoteIP, 40000).build(), ctxPodA),
		spoofed("the node IP", tcp.withSrc(nodeIP, 40000).build(), ctxPodA),
		spoofed("a service IP", udp.withSrc(vip, 53).build(), ctxPodA),
		spoofed("an outside address", tcp.withSrc(extHost, 443).build(), ctxPodA),
		spoofed("the unspecified address", udp.withSrc("0.0.0.0", 68).build(), ctxPodA),
		spoofed("the hairpin address", tcp.withSrc(hairpin, 40000).build(), ctxPodA),
		spoofed("pod A's address with a forged MAC", udp.withMACs(mac("02:aa:00:00:00:99"), hostBMAC).build(), ctxPodA),
		spoofed("pod A's address and MAC on pod B's veth", udp.build(), ctxPodB),
		spoofed("pod A's packet on an unknown device", udp.build(), &skbCtx{IngressIfindex: 77}),
		{name: "ARP from pod A", endpoints: seedAB, in: arpRequest(), ctx: ctxPodA, verdict: tcActOK, reason: "PASS_STACK"},
		spoofed("ARP announcing pod B's address", arpFrame("02:aa:00:00:00:01", "02:aa:00:00:00:01", mustAddr(podBIP)), ctxPodA),
		spoofed("ARP announcing the node IP", arpFrame("02:aa:00:00:00:01", "02:aa:00:00:00:01", testNodeIP), ctxPodA),
		spoofed("ARP with a forged sender MAC", arpFrame("02:aa:00:00:00:01", "02:aa:00:00:00:99", mustAddr(podA)), ctxPodA),
		spoofed("ARP with forged Ethernet and sender MACs", arpFrame("02:aa:00:00:00:99", "02:aa:00:00:00:99", mustAddr(podA)), ctxPodA),
		spoofed("ARP from pod A on pod B's veth", arpRequest(), ctxPodB),
		unsupported("ARP for IPv6 addresses", mutate(arpRequest(), func(b []byte) []byte { b[16], b[17] = 0x86, 0xdd; return b })),
		{name: "ARP cut short", endpoints: seedAB, in: arpRequest()[:14+20], ctx: ctxPodA, verdict: tcActShot, reason: "DROP_INVALID_PACKET"},
		unsupported("IPv6 router advertisement", routerAdvertisement()),
		unsupported("IPv6", ipv6Frame()),
		unsupported("802.1Q-tagged IPv4", vlan),
		unsupported("LLDP", append(ethernet(mac("01:80:c2:00:00:0e"), podAMAC, 0x88cc), make([]byte, 46)...)),
	}
}

// A pod may send IPv4 only from its own address and MAC, and ARP only about
// them, on its own veth; nothing else. Checked before anything acts on the
// packet, in both host routing modes.
func TestPrivilegedBPFSourceValidation(t *testing.T) {
	requirePrivileged(t)
	udp := ipv4(protoUDP, podA, podBIP)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTest(t, routing)
			valid := progCase{name: "pod A's own address and MAC", endpoints: seedAB, in: udp.build(), ctx: ctxPodA,
				verdict: tcActRedirect, out: delivered(udp), reason: "FORWARDED"}
			if routing == HostRoutingLegacy {
				valid.verdict, valid.out, valid.reason = tcActOK, nil, "PASS_STACK"
			}
			runCases(t, d, d.objs.MyelinFromPod, "from-pod", sourceCases(valid))
		})
	}
}

// With load balancing on, a forged source is dropped before the service
// lookup: it never creates a conntrack entry or gets translated.
func TestPrivilegedBPFSourceValidationBeforeServices(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	forged := ipv4(protoTCP, podBIP, vip).withSrc(podBIP, 40000).withDst(vip, 80)
	runLBCases(t, d, []lbCase{
		{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{2}}), prog: d.objs.MyelinFromPod, dir: "from-pod",
			then: func(d *Datapath) error { return checkCTEmpty(d) },
			progCase: progCase{name: "pod B's address to a ClusterIP from pod A's veth", endpoints: seedAB, in: forged.build(), ctx: ctxPodA,
				verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
		{seed: oneService(feTCP, Service{ID: 1}), prog: d.objs.MyelinFromPod, dir: "from-pod",
			progCase: progCase{name: "forged source to a Service without backends: no ICMP answer", endpoints: seedAB, in: forged.build(), ctx: ctxPodA,
				verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
	})
}

// checkCTEmpty requires that no load-balanced flow exists.
func checkCTEmpty(d *Datapath) error {
	var k myelinCtKey
	if err := d.objs.MyelinLbCt.NextKey(nil, &k); err == nil {
		return fmt.Errorf("conntrack holds %+v, want no flow", k)
	}
	return nil
}

// enable-source-ip-verification false (only for measuring its cost): forged
// sources pass, non-IPv4 is still dropped.
func TestPrivilegedBPFSourceValidationOff(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NoSourceVerification: true})
	forged := ipv4(protoUDP, podBIP, podBIP).withSrc(extHost, 40000)
	runCases(t, d, d.objs.MyelinFromPod, "from-pod", []progCase{
		{name: "an outside address is forwarded", endpoints: seedAB, in: forged.build(), ctx: ctxPodA, verdict: tcActRedirect, out: delivered(forged), reason: "FORWARDED"},
		{name: "ARP announcing pod B passes", endpoints: seedAB, in: arpFrame("02:aa:00:00:00:01", "02:aa:00:00:00:01", mustAddr(podBIP)), ctx: ctxPodA,
			verdict: tcActOK, reason: "PASS_STACK"},
		{name: "IPv6 router advertisement still dropped", endpoints: seedAB, in: routerAdvertisement(), ctx: ctxPodA, verdict: tcActShot, reason: "DROP_UNSUPPORTED_L3"},
	})
}

// A forged source's drop event names the forged address and pod A's veth's
// device; an ARP one the announced address.
func TestPrivilegedBPFSpoofedSourceEvent(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	forged := ipv4(protoTCP, nodeIP, podBIP).build()
	arp := arpFrame("02:aa:00:00:00:01", "02:aa:00:00:00:01", mustAddr(podBIP))
	for _, c := range []struct {
		in   []byte
		want Event
	}{
		{forged, Event{Type: "drop", Reason: "DROP_SPOOFED_SOURCE", Direction: "from-pod", IfIndex: 1,
			Src: mustAddr(nodeIP), Dst: mustAddr(podBIP), Proto: protoTCP, SrcPort: 40000, DstPort: 8080, Len: uint32(len(forged))}},
		{arp, Event{Type: "drop", Reason: "DROP_SPOOFED_SOURCE", Direction: "from-pod", IfIndex: 1,
			Src: mustAddr(podBIP), Dst: mustAddr("169.254.1.1"), Len: uint32(len(arp))}},
	} {
		if _, _, err := runPacket(d.objs.MyelinFromPod, c.in, ctxPodA); err != nil {
			t.Fatal(err)
		}
		ev, ok := readEvent(t, r, time.Second)
		if !ok || ev != c.want {
			t.Errorf("event = %+v (%v), want %+v", ev, ok, c.want)
		}
	}
}

// forwardedRun runs in through p with the context of a forwarded packet
// (ctxForwarded) when p is an egress program, whose pod-sourced packets
// would otherwise be the node's own (withForwarder); ingress programs get
// none.
func forwardedRun(d *Datapath, p *ebpf.Program, in []byte) *ebpf.RunOptions {
	if p == d.objs.MyelinToNetdev || p == d.objs.MyelinToPod || p == d.objs.MyelinToOverlay {
		return runOptions(in, *ctxForwarded)
	}
	return runOptions(in, nil)
}
