package datapath

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/testenv"
)

// Tunnel fixtures: node B (198.51.100.2) owns PodCIDR 10.2.0.0/24; the
// overlay device's ifindex is arbitrary, test-run never transmits.
const testOverlayIfIndex = 99

// testOverlayMAC is node A's myelin_vxlan MAC (its underlay IP is 198.51.100.1).
var testOverlayMAC = OverlayMAC(netip.MustParseAddr("198.51.100.1"))

var seedTunnelB = map[string]string{"10.2.0.0/24": "198.51.100.2"}

// loadTunnelTest loads a tunnel-mode datapath.
func loadTunnelTest(t *testing.T, routing HostRouting) *Datapath {
	t.Helper()
	return loadTestConfig(t, Config{HostRouting: routing, Tunnel: true, OverlayIfIndex: testOverlayIfIndex, OverlayMAC: testOverlayMAC,
		NodeIP: mustAddr("198.51.100.1")})
}

// From_pod in tunnel mode. Without a test-run context the FIB lookup fails
// (ingress_ifindex 0) and passes to the stack, so a redirect proves the
// tunnel path was taken. bpf_redirect to the overlay returns TC_ACT_REDIRECT
// without transmitting: the frame comes out as handed to myelin_vxlan, inner
// MACs set to the shared overlay MAC and TTL decremented; the tunnel metadata is not visible
// here (TestPrivilegedTunnelEndToEnd checks it on the wire).
func TestPrivilegedBPFFromPodTunnel(t *testing.T) {
	requirePrivileged(t)
	d := loadTunnelTest(t, HostRoutingBPF)

	toB := ipv4(protoUDP, "10.1.0.10", "10.2.0.5")
	tcpToB := ipv4(protoTCP, "10.1.0.10", "10.2.0.200")
	nodeB := OverlayMAC(netip.MustParseAddr("198.51.100.2"))
	decTTL := func(p pkt) []byte { return p.withMACs(testOverlayMAC, nodeB).withTTL(p.ttl - 1).build() }
	local := ipv4(protoUDP, "10.1.0.10", "10.1.0.20")
	cases := []progCase{
		{name: "UDP to remote PodCIDR: encapsulated", endpoints: seedB, tunnels: seedTunnelB, in: toB.build(), verdict: tcActRedirect, out: decTTL(toB), reason: "FORWARDED"},
		{name: "TCP to remote PodCIDR: encapsulated", endpoints: seedB, tunnels: seedTunnelB, in: tcpToB.build(), verdict: tcActRedirect, out: decTTL(tcpToB), reason: "FORWARDED"},
		{name: "longest prefix among several", endpoints: seedB, in: toB.build(), verdict: tcActRedirect, out: decTTL(toB), reason: "FORWARDED",
			tunnels: map[string]string{"10.0.0.0/8": "198.51.100.9", "10.2.0.0/24": "198.51.100.2", "10.3.0.0/24": "198.51.100.3"}},
		{name: "TTL 2 to remote PodCIDR", endpoints: seedB, tunnels: seedTunnelB, in: toB.withTTL(2).build(), verdict: tcActRedirect, out: decTTL(toB.withTTL(2)), reason: "FORWARDED"},
		// The stack must see TTL 1 and 0 to send ICMP time exceeded.
		{name: "TTL 1 to remote PodCIDR", endpoints: seedB, tunnels: seedTunnelB, in: toB.withTTL(1).build(), verdict: tcActOK, reason: "PASS_STACK"},
		{name: "local endpoint wins over tunnel map", endpoints: seedB, tunnels: map[string]string{"10.1.0.0/16": "198.51.100.2"},
			in: local.build(), verdict: tcActRedirect, out: delivered(local), reason: "FORWARDED"},
		{name: "tunnel miss goes to the FIB", endpoints: seedB, tunnels: seedTunnelB, in: ipv4(protoUDP, "10.1.0.10", "10.9.0.1").build(), verdict: tcActOK, reason: "PASS_STACK"},
		{name: "empty tunnel map goes to the FIB", endpoints: seedB, in: toB.build(), verdict: tcActOK, reason: "PASS_STACK"},
		{name: "ARP", endpoints: seedB, tunnels: seedTunnelB, in: arpRequest(), verdict: tcActOK, reason: "PASS_STACK"},
		{name: "IPv6", endpoints: seedB, tunnels: seedTunnelB, in: ipv6Frame(), verdict: tcActShot, reason: "DROP_UNSUPPORTED_L3"},
	}
	cases = append(cases, withDrop(invalidCases(), seedB)...)
	runCases(t, d, d.objs.MyelinFromPod, "from-pod", cases)
}

// Legacy host routing in tunnel mode: the kernel encapsulates by the
// agent's encap routes, so from_pod hands everything to the stack untouched.
func TestPrivilegedBPFLegacyTunnel(t *testing.T) {
	requirePrivileged(t)
	d := loadTunnelTest(t, HostRoutingLegacy)
	toB := ipv4(protoUDP, "10.1.0.10", "10.2.0.5")
	cases := []progCase{
		{name: "to remote PodCIDR", endpoints: seedB, tunnels: seedTunnelB, in: toB.build(), verdict: tcActOK, reason: "PASS_STACK"},
		{name: "to local endpoint", endpoints: seedB, tunnels: seedTunnelB, in: ipv4(protoUDP, "10.1.0.10", "10.1.0.20").build(), verdict: tcActOK, reason: "PASS_STACK"},
	}
	runCases(t, d, d.objs.MyelinFromPod, "from-pod", cases)
	// Test-run has no tunnel metadata: from_overlay can't know the peer
	// (TestPrivilegedTunnelEndToEnd sends real VXLAN, from known and unknown peers).
	runCases(t, d, d.objs.MyelinFromOverlay, "from-overlay", []progCase{
		{name: "decapsulated for local endpoint, no tunnel metadata", endpoints: seedB, tunnels: seedTunnelB,
			in: ipv4(protoUDP, "10.2.0.5", "10.1.0.20").build(), verdict: tcActShot, reason: "DROP_UNKNOWN_TUNNEL_PEER"},
	})
}

// From_overlay accepts only IPv4 from the node owning its inner source,
// read from the tunnel metadata. Test-run can't attach tunnel metadata to an
// skb, so here every IPv4 packet is from an unknown peer; delivery (exact
// TTL, counters) and the peer rules against real VXLAN frames from known
// and unknown underlay addresses are TestPrivilegedTunnelEndToEnd's.
func TestPrivilegedBPFFromOverlay(t *testing.T) {
	requirePrivileged(t)
	d := loadTunnelTest(t, HostRoutingBPF)

	// The inner frame as node A's pod sent it: its MACs are node A's veth pair.
	fromA := ipv4(protoTCP, "10.2.0.5", "10.1.0.20").withMACs(mac("02:aa:00:00:00:05"), mac("02:aa:00:00:01:05"))
	cases := []progCase{
		{name: "TCP to local endpoint, no tunnel metadata", endpoints: seedB, tunnels: seedTunnelB, in: fromA.build(), verdict: tcActShot, reason: "DROP_UNKNOWN_TUNNEL_PEER"},
		{name: "node IP as inner source, no tunnel metadata", endpoints: seedB, tunnels: seedTunnelB,
			in: ipv4(protoTCP, "198.51.100.2", "10.1.0.20").build(), verdict: tcActShot, reason: "DROP_UNKNOWN_TUNNEL_PEER"},
		{name: "ARP", endpoints: seedB, in: arpRequest(), verdict: tcActShot, reason: "DROP_UNSUPPORTED_L3"},
		{name: "IPv6", endpoints: seedB, in: ipv6Frame(), verdict: tcActShot, reason: "DROP_UNSUPPORTED_L3"},
	}
	cases = append(cases, withDrop(invalidCases(), seedB)...)
	runCases(t, d, d.objs.MyelinFromOverlay, "from-overlay", cases)
}

// vxlanToA wraps inner in VXLAN with VNI vni from outerSrc to node A
// (198.51.100.1), port 8472, as a node's kernel sends it: no outer UDP
// checksum, to the receiving host's MAC (test-run's device is loopback,
// whose MAC is all zeros).
func vxlanToA(outerSrc string, vni uint32, inner []byte) pkt {
	p := ipv4(protoUDP, outerSrc, "198.51.100.1").withSrc(outerSrc, 51000).withDst("198.51.100.1", tunnelPort).
		withMACs(mac("02:00:00:00:00:02"), mac("00:00:00:00:00:00")).withoutUDPChecksum()
	p.payload = vxlanPayload(vni, inner)
	return p
}

// Myelin_from_netdev decapsulates VXLAN for local pods itself (node A here,
// with NodeIP and TunnelPort): what it takes is delivered as
// myelin_from_overlay delivers (counted from-overlay FORWARDED, the inner
// frame's bytes); everything it leaves goes on unchanged towards the stack
// and myelin_vxlan (from-netdev PASS_STACK), where the device and
// myelin_from_overlay check it as before.
func TestPrivilegedBPFFromNetdevDecap(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, Tunnel: true, OverlayIfIndex: testOverlayIfIndex,
		OverlayMAC: testOverlayMAC, NodeIP: mustAddr("198.51.100.1"), TunnelPort: tunnelPort})

	// The inner frame as node B's pod sent it and node B addressed it.
	inner := ipv4(protoTCP, "10.2.0.5", "10.1.0.20").withMACs(OverlayMAC(mustAddr("198.51.100.2")), testOverlayMAC)
	fromB := vxlanToA("198.51.100.2", 0, inner.build())
	nodeB := ipv4(protoUDP, "198.51.100.2", "10.1.0.20").withMACs(OverlayMAC(mustAddr("198.51.100.2")), testOverlayMAC)
	delivered := func(name string, in []byte, p pkt) progCase {
		return progCase{name: name, endpoints: seedB, tunnels: seedTunnelB, in: in, verdict: tcActRedirect,
			out: delivered(p), reason: "FORWARDED", countDir: "from-overlay", countLen: true}
	}
	passed := func(name string, in []byte) progCase {
		return progCase{name: name, endpoints: seedB, tunnels: seedTunnelB, in: in, verdict: tcActOK, reason: "PASS_STACK"}
	}
	twoPods := map[string]EndpointInfo{"10.1.0.20": podB, "10.1.0.21": podB}
	withCsum := fromB
	withCsum.udpNoCsum = false
	cases := []progCase{
		delivered("pod of node B to local pod: delivered", fromB.build(), inner),
		delivered("node B itself to local pod: delivered", vxlanToA("198.51.100.2", 0, nodeB.build()).build(), nodeB),
		passed("pod source from a stranger: left to the device", vxlanToA("198.51.100.99", 0, inner.build()).build()),
		passed("node B with another node's pod source: left to the device",
			vxlanToA("198.51.100.2", 0, inner.withSrc("10.3.0.7", 40000).build()).build()),
		passed("this node's own address as inner source: left to the device",
			vxlanToA("198.51.100.2", 0, inner.withSrc("198.51.100.1", 40000).build()).build()),
		// A pod tunnelling its own packets from its own address to a node's
		// tunnel port would carry them past its egress policy.
		passed("a pod of node B as outer and inner source: left to the device",
			vxlanToA("10.2.0.33", 0, inner.withSrc("10.2.0.33", 40000).build()).build()),
		{name: "a pod of this node as outer and inner source: left to the device", endpoints: twoPods, tunnels: seedTunnelB,
			in: vxlanToA("10.1.0.21", 0, inner.withSrc("10.1.0.21", 40000).build()).build(), verdict: tcActOK, reason: "PASS_STACK"},
		passed("inner destination not a local pod: left to the device",
			vxlanToA("198.51.100.2", 0, inner.withDst("10.1.0.99", 8080).build()).build()),
		passed("VNI 1: left to the device", vxlanToA("198.51.100.2", 1, inner.build()).build()),
		passed("another UDP port: left to the stack", fromB.withDst("198.51.100.1", 4789).build()),
		passed("outer UDP checksum: left to the device", withCsum.build()),
		passed("outer ECN CE: left to the device", fromB.withTOS(3).build()),
		delivered("outer ECN ECT(0): delivered", fromB.withTOS(2).build(), inner),
		passed("another host's MAC: left to the stack",
			vxlanToA("198.51.100.2", 0, inner.build()).withMACs(mac("02:00:00:00:00:02"), mac("02:bb:00:00:00:09")).build()),
		passed("inner ARP: left to the device", vxlanToA("198.51.100.2", 0, arpRequest()).build()),
		{name: "inner TTL 1: decapsulated, to the stack", endpoints: seedB, tunnels: seedTunnelB,
			in: vxlanToA("198.51.100.2", 0, inner.withTTL(1).build()).build(), verdict: tcActOK,
			out:    inner.withTTL(1).withMACs(mac("02:00:00:00:00:02"), mac("00:00:00:00:00:00")).build(),
			reason: "PASS_STACK", countDir: "from-overlay", countLen: true},
	}
	runCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", cases)

	// A GSO packet (a GRO aggregate, or one a veth underlay carried whole)
	// keeps its headers: the device strips them and clears the UDP tunnel GSO
	// state. Test-run can only set gso_size, not that state (gso_type), so
	// this row holds whether the program or bpf_skb_adjust_room declines the
	// packet; TestPrivilegedTunnelEndToEnd sends real GSO packets.
	t.Run("GSO: left to the device", func(t *testing.T) {
		gso := skbCtxGSO{GSOSegs: 2, GSOSize: 1400}
		in := fromB.build()
		opts := runOptions(in, gso)
		ret, err := d.objs.MyelinFromNetdev.Run(opts)
		if err != nil {
			t.Fatal(err)
		}
		if ret != tcActOK || !bytes.Equal(opts.DataOut, in) {
			t.Errorf("verdict %d, out\n%x\nwant %d and the packet unchanged", ret, opts.DataOut, tcActOK)
		}
	})
}

// In tunnel mode pods of other nodes arrive encapsulated: a plain packet on the
// uplink from a pod address to a local pod is an underlay host forging a pod's
// source (it would be judged by the policy as that pod), in both host routing
// modes; to the node's address (a NodePort, the kubelet) it is what a remote pod
// sends, and from outside the cluster CIDR the policy judges it. Native routing
// takes pod sources from the uplink, as routed.
func TestPrivilegedBPFFromNetdevTunnelPlainPodSource(t *testing.T) {
	requirePrivileged(t)
	fromUplink := &skbCtx{IngressIfindex: 2}
	remotePod := ipv4(protoTCP, "10.2.0.5", podBIP).withDst(podBIP, 8080)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		for _, tunnel := range []bool{true, false} {
			name := routing.String() + "/native"
			cfg := Config{HostRouting: routing, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR}
			if tunnel {
				name = routing.String() + "/tunnel"
				cfg.Tunnel, cfg.OverlayIfIndex, cfg.OverlayMAC = true, testOverlayIfIndex, testOverlayMAC
			}
			t.Run(name, func(t *testing.T) {
				d := loadTestConfig(t, cfg)
				reached := progCase{verdict: tcActOK, reason: "PASS_STACK"}
				if routing == HostRoutingBPF {
					reached = progCase{verdict: tcActRedirect, out: delivered(remotePod), reason: "FORWARDED"}
				}
				fromPod := reached
				fromPod.name, fromPod.in = "a remote pod's address to a local pod", remotePod.build()
				if tunnel {
					fromPod.verdict, fromPod.out, fromPod.reason = tcActShot, nil, "DROP_SPOOFED_SOURCE"
				}
				outside := reached
				outside.name, outside.in = "an outside address to a local pod", remotePod.withSrc("203.0.113.9", 40000).build()
				if routing == HostRoutingBPF {
					outside.out = delivered(remotePod.withSrc("203.0.113.9", 40000))
				}
				toNode := progCase{name: "a remote pod's address to the node", verdict: tcActOK, reason: "PASS_STACK",
					in: remotePod.withDst(nodeIP, 30080).build()}
				cases := []progCase{fromPod, outside, toNode}
				for i := range cases {
					cases[i].endpoints, cases[i].ctx = seedB, fromUplink
				}
				runCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", cases)
			})
		}
	}
}

// The same check where the stack delivers (myelin_to_pod): from this node's PodCIDR,
// only the owning pod's veth may have brought a packet in (legacy host routing
// between two pods of the node); from another device (a second uplink, a foreign
// tunnel device) it is forged, an address of the PodCIDR no pod has too, the node's
// health address included (a scope-host address the stack never forwards). Pods of
// other nodes pass from anywhere, and without the PodCIDR everything passes, as
// before. (What the host built, ingress_ifindex 0, is host_source_check's: that
// runs first in myelin_to_pod, TestPrivilegedHostSourceCheck.)
func TestPrivilegedBPFToPodLocalPodSource(t *testing.T) {
	requirePrivileged(t)
	fromDevice := &skbCtx{IngressIfindex: 2}
	toA := func(src string) []byte { return ipv4(protoTCP, src, podA).withDst(podA, 8080).build() }
	for _, check := range []bool{true, false} {
		cfg := Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR, HealthIP: mustAddr(testHealthIP)}
		name := "unchecked"
		if check {
			cfg.LocalPodCIDR, name = testLocalPodCIDR, "checked"
		}
		t.Run(name, func(t *testing.T) {
			d := loadTestConfig(t, cfg)
			var cases []progCase
			for _, c := range []struct {
				name, src string
				ctx       *skbCtx
				forged    bool
			}{
				{"pod B from its own veth", podBIP, &skbCtx{IngressIfindex: uint32(podB.IfIndex)}, false},
				{"pod B from another device", podBIP, fromDevice, true},
				{"pod B from pod A's veth", podBIP, ctxPodA, true},
				{"a PodCIDR address of no pod from another device", "10.1.0.77", fromDevice, true},
				{"the health address from another device", testHealthIP, fromDevice, true},
				{"a pod of another node from another device", "10.2.0.5", fromDevice, false},
			} {
				pc := progCase{name: c.name, endpoints: seedAB, in: toA(c.src), ctx: c.ctx, verdict: tcActOK, reason: "PASS_STACK"}
				if check && c.forged {
					pc.verdict, pc.reason = tcActShot, "DROP_SPOOFED_SOURCE"
				}
				cases = append(cases, pc)
			}
			runCases(t, d, d.objs.MyelinToPod, "to-pod", cases)
		})
	}
}

// With this node's PodCIDR set (Config.LocalPodCIDR: the agent found that no other
// host sends from it), a packet from it arriving on the uplink is an underlay host
// posing as a pod of this node, whatever its destination (a local pod, the node's
// address), the node's health address too: DROP_SPOOFED_SOURCE in both routing and
// both host routing modes. Without it (and from a pod of another node in native
// routing) the packet goes on as before, so the drop is the check's. In tunnel mode
// a plain packet from one pod to another is dropped by tunnel mode's own rule either
// way (TestPrivilegedBPFFromNetdevTunnelPlainPodSource); the other rows tell.
func TestPrivilegedBPFFromNetdevLocalPodSource(t *testing.T) {
	requirePrivileged(t)
	fromUplink := &skbCtx{IngressIfindex: 2}
	localPod := ipv4(protoTCP, podA, podBIP).withDst(podBIP, 8080)
	spoofed := progCase{verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		for _, tunnel := range []bool{true, false} {
			for _, check := range []bool{true, false} {
				cfg := Config{HostRouting: routing, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR}
				name := routing.String() + "/native"
				if tunnel {
					name = routing.String() + "/tunnel"
					cfg.Tunnel, cfg.OverlayIfIndex, cfg.OverlayMAC = true, testOverlayIfIndex, testOverlayMAC
				}
				if check {
					cfg.LocalPodCIDR = testLocalPodCIDR
				} else {
					name += "/unchecked"
				}
				t.Run(name, func(t *testing.T) {
					d := loadTestConfig(t, cfg)
					reached := progCase{verdict: tcActOK, reason: "PASS_STACK"}
					if routing == HostRoutingBPF {
						reached = progCase{verdict: tcActRedirect, out: delivered(localPod), reason: "FORWARDED"}
					}
					toNode := progCase{verdict: tcActOK, reason: "PASS_STACK"}
					fromPod, toNodeAddr, health := reached, toNode, toNode
					if check {
						fromPod, toNodeAddr, health = spoofed, spoofed, spoofed
					}
					if tunnel { // plain pod to pod: tunnel mode's own rule drops it too (same reason)
						fromPod = spoofed
					}
					fromPod.name, fromPod.in = "a pod of this node to a local pod", localPod.build()
					toNodeAddr.name, toNodeAddr.in = "a pod of this node to the node's address", localPod.withDst(nodeIP, 30080).build()
					health.name, health.in = "the health address to the node", localPod.withSrc("10.1.0.1", 4240).withDst(nodeIP, 30080).build()
					remote := ipv4(protoTCP, "10.2.0.5", podBIP).withDst(podBIP, 8080)
					other := progCase{name: "a pod of another node to a local pod", in: remote.build(), verdict: tcActOK, reason: "PASS_STACK"}
					switch {
					case tunnel:
						other.verdict, other.reason = tcActShot, "DROP_SPOOFED_SOURCE"
					case routing == HostRoutingBPF:
						other.verdict, other.out, other.reason = tcActRedirect, delivered(remote), "FORWARDED"
					}
					cases := []progCase{fromPod, toNodeAddr, health, other}
					for i := range cases {
						cases[i].endpoints, cases[i].ctx = seedB, fromUplink
					}
					runCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", cases)
				})
			}
		}
	}
	t.Run("not IPv4", func(t *testing.T) {
		_, err := Load(Config{PinDir: testPinDir(t), LocalPodCIDR: netip.MustParsePrefix("fd00:1::/64")})
		if err == nil || !strings.Contains(err.Error(), "LocalPodCIDR") {
			t.Errorf("Load with an IPv6 LocalPodCIDR: %v, want an error naming LocalPodCIDR", err)
		}
	})
}

func TestPrivilegedTunnelAPI(t *testing.T) {
	requirePrivileged(t)
	d := loadTunnelTest(t, HostRoutingBPF)
	cidrB, nodeB := netip.MustParsePrefix("10.2.0.0/24"), netip.MustParseAddr("198.51.100.2")
	for name, c := range map[string]struct {
		cidr netip.Prefix
		node netip.Addr
	}{
		"IPv6 PodCIDR":     {netip.MustParsePrefix("fd00::/64"), nodeB},
		"4-in-6 PodCIDR":   {netip.MustParsePrefix("::ffff:10.2.0.0/120"), nodeB},
		"invalid PodCIDR":  {netip.Prefix{}, nodeB},
		"IPv6 node IP":     {cidrB, netip.MustParseAddr("fd00::2")},
		"zero node IP":     {cidrB, netip.MustParseAddr("0.0.0.0")},
		"multicast nodeIP": {cidrB, netip.MustParseAddr("239.0.0.1")},
	} {
		if err := d.UpsertTunnel(c.cidr, c.node); err == nil {
			t.Errorf("%s: UpsertTunnel(%s, %s) accepted", name, c.cidr, c.node)
		}
	}
	// Host bits are dropped; an upsert of the same PodCIDR replaces.
	if err := d.UpsertTunnel(netip.MustParsePrefix("10.2.0.7/24"), netip.MustParseAddr("198.51.100.9")); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertTunnel(cidrB, nodeB); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertTunnel(netip.MustParsePrefix("10.3.0.0/16"), netip.MustParseAddr("::ffff:198.51.100.3")); err != nil {
		t.Errorf("UpsertTunnel with an IPv4-mapped node IP: %v", err)
	}
	got, err := d.Tunnels()
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]netip.Addr{cidrB: nodeB, netip.MustParsePrefix("10.3.0.0/16"): netip.MustParseAddr("198.51.100.3")}
	if len(got) != len(want) || got[cidrB] != nodeB || got[netip.MustParsePrefix("10.3.0.0/16")] != want[netip.MustParsePrefix("10.3.0.0/16")] {
		t.Errorf("Tunnels() = %v, want %v", got, want)
	}
	fill, err := d.MapFill()
	if err != nil {
		t.Fatal(err)
	}
	if len(fill) != 3 || fill[1] != (MapFill{Name: "myelin_tunnel", Entries: 2, Max: 1024}) {
		t.Errorf("MapFill = %+v, want myelin_tunnel 2 of 1024", fill)
	}
	for i := 0; i < 2; i++ {
		if err := d.DeleteTunnel(cidrB); err != nil {
			t.Errorf("DeleteTunnel #%d: %v", i+1, err)
		}
	}
	if got, _ := d.Tunnels(); len(got) != 1 {
		t.Errorf("Tunnels() after delete = %v, want only 10.3.0.0/16", got)
	}
}

func TestLoadTunnelNeedsOverlay(t *testing.T) {
	for _, idx := range []int{0, -1, 1 << 40} {
		_, err := Load(Config{PinDir: "/nonexistent", Tunnel: true, OverlayIfIndex: idx, OverlayMAC: testOverlayMAC})
		if err == nil || !strings.Contains(err.Error(), "OverlayIfIndex") {
			t.Errorf("Load with Tunnel and OverlayIfIndex %d: err = %v, want one naming OverlayIfIndex", idx, err)
		}
	}
	_, err := Load(Config{PinDir: "/nonexistent", Tunnel: true, OverlayIfIndex: testOverlayIfIndex, OverlayMAC: testOverlayMAC})
	if err == nil || !strings.Contains(err.Error(), "NodeIP") {
		t.Errorf("Load with Tunnel and no NodeIP: err = %v, want one naming NodeIP", err)
	}
}

func TestTunnelKey(t *testing.T) {
	k, err := tunnelKey(netip.MustParsePrefix("10.2.3.4/16"))
	if err != nil {
		t.Fatal(err)
	}
	if k.Prefixlen != 16 || addrFromNetwork(k.Addr) != netip.MustParseAddr("10.2.0.0") {
		t.Errorf("tunnelKey(10.2.3.4/16) = %+v, want /16 of 10.2.0.0", k)
	}
}

// The development kernel (6.18) has CONFIG_VXLAN=y and no CONFIG_GENEVE;
// where /proc/config.gz says otherwise, Geneve must probe fine instead.
func TestPrivilegedProbeTunnelProtocol(t *testing.T) {
	requirePrivileged(t)
	if err := ProbeTunnelProtocol("vxlan"); err != nil {
		t.Errorf("ProbeTunnelProtocol(vxlan) = %v, want nil", err)
	}
	err := ProbeTunnelProtocol("geneve")
	const missing = "tunnel-protocol geneve: this kernel cannot create Geneve devices (CONFIG_GENEVE missing"
	if kernelConfig(t, "CONFIG_GENEVE") != "" {
		if err != nil {
			t.Errorf("ProbeTunnelProtocol(geneve) = %v on a kernel with CONFIG_GENEVE", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("ProbeTunnelProtocol(geneve) = %v, want %q...", err, missing)
	}
	if err := ProbeTunnelProtocol("gre"); err == nil {
		t.Error("ProbeTunnelProtocol(gre) accepted an unknown protocol")
	}
}

// kernelConfig returns the value ("y", "m") of option in /proc/config.gz,
// "" if it is not set; it skips the test when the config is not readable.
func kernelConfig(t *testing.T, option string) string {
	t.Helper()
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		testenv.Skipf(t, "kernel config not readable: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		testenv.Skipf(t, "kernel config not readable: %v", err)
	}
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), option+"="); ok {
			return v
		}
	}
	return ""
}

// What the stack delivers into a pod with an IPv4 header ipv4_parse rejects is
// dropped, as on every other hook: passed unparsed, it would skip the pod's
// NetworkPolicy and source checks.
func TestPrivilegedBPFToPodMalformed(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	runCases(t, d, d.objs.MyelinToPod, "to-pod", withDrop(invalidCases(), seedB))
}
