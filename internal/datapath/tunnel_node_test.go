package datapath

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// tunnel-pod-to-node: node A (testNodeIP) sees node B at 198.51.100.2, which
// owns PodCIDR 10.2.0.0/24 and is in the tunnel node map; 198.51.100.9 is a
// host that is no node.
const (
	tunnelNodeB  = "198.51.100.2"
	tunnelNoNode = "198.51.100.9"
)

var podToNodeModes = []TunnelPodToNode{TunnelPodToNodePlain, TunnelPodToNodeEncapsulate, TunnelPodToNodeEnforce}

func (m TunnelPodToNode) String() string {
	return [...]string{"plain", "encapsulate", "enforce"}[m]
}

// loadTunnelPodToNode loads a tunnel-mode datapath with BPF host routing and
// tunnel-pod-to-node mode, with node B in the tunnel node map.
func loadTunnelPodToNode(t *testing.T, mode TunnelPodToNode) *Datapath {
	t.Helper()
	return loadTunnelPodToNodeRouting(t, mode, HostRoutingBPF)
}

// loadTunnelPodToNodeRouting is loadTunnelPodToNode with host routing routing.
func loadTunnelPodToNodeRouting(t *testing.T, mode TunnelPodToNode, routing HostRouting) *Datapath {
	t.Helper()
	d := loadTestConfig(t, Config{HostRouting: routing, Tunnel: true, OverlayIfIndex: testOverlayIfIndex,
		OverlayMAC: testOverlayMAC, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR, TunnelPodToNode: mode})
	if err := d.UpsertTunnelNode(mustAddr(tunnelNodeB)); err != nil {
		t.Fatal(err)
	}
	return d
}

// From a pod, another node's IP is reached through the overlay once the key is
// not plain (a redirect to the overlay with node B's overlay MAC and the TTL
// decremented, as to B's pods), plain as routed otherwise (the FIB, which
// test-run can't use: PASS_STACK); a host that is no node is routed in every mode.
func TestPrivilegedBPFFromPodTunnelToNode(t *testing.T) {
	requirePrivileged(t)
	toNode := ipv4(protoTCP, "10.1.0.10", tunnelNodeB).withDst(tunnelNodeB, 10250)
	toPod := ipv4(protoUDP, "10.1.0.10", "10.2.0.5")
	toHost := ipv4(protoTCP, "10.1.0.10", tunnelNoNode).withDst(tunnelNoNode, 443)
	overlayB := OverlayMAC(mustAddr(tunnelNodeB))
	encapsulated := func(p pkt) []byte { return p.withMACs(testOverlayMAC, overlayB).withTTL(p.ttl - 1).build() }
	for _, mode := range podToNodeModes {
		t.Run(mode.String(), func(t *testing.T) {
			d := loadTunnelPodToNode(t, mode)
			node := progCase{name: "to node B's IP", in: toNode.build(), verdict: tcActOK, reason: "PASS_STACK"}
			if mode != TunnelPodToNodePlain {
				node.verdict, node.out, node.reason = tcActRedirect, encapsulated(toNode), "FORWARDED"
			}
			cases := []progCase{
				node,
				{name: "to a pod of node B", in: toPod.build(), verdict: tcActRedirect, out: encapsulated(toPod), reason: "FORWARDED"},
				{name: "to a host that is no node", in: toHost.build(), verdict: tcActOK, reason: "PASS_STACK"},
			}
			for i := range cases {
				cases[i].endpoints, cases[i].tunnels = seedB, seedTunnelB
			}
			runCases(t, d, d.objs.MyelinFromPod, "from-pod", cases)
		})
	}
}

// On the uplink, a plain packet from a pod address to this node's IP is what a
// pod of another node sends with the key plain; with encapsulate it goes on and
// is counted (PLAIN_POD_TO_NODE: a node still sending them, before enforce);
// with enforce it is forged: DROP_SPOOFED_SOURCE. The node's own traffic and an
// outside client are never touched. The same in both host routing modes: the
// receiver's checks are the programs'.
func TestPrivilegedBPFFromNetdevTunnelPodToNode(t *testing.T) {
	requirePrivileged(t)
	fromUplink := &skbCtx{IngressIfindex: 2}
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		for _, mode := range podToNodeModes {
			t.Run(routing.String()+"/"+mode.String(), func(t *testing.T) { fromNetdevPodToNode(t, routing, mode, fromUplink) })
		}
	}
}

// fromNetdevPodToNode is one host routing mode and key of TestPrivilegedBPFFromNetdevTunnelPodToNode.
func fromNetdevPodToNode(t *testing.T, routing HostRouting, mode TunnelPodToNode, fromUplink *skbCtx) {
	d := loadTunnelPodToNodeRouting(t, mode, routing)
	for _, c := range []struct {
		name, src string
		pod       bool
	}{
		{"a pod of node B", "10.2.0.5", true},
		{"a cluster address of no node's PodCIDR", "10.3.9.9", true},
		{"node B itself", tunnelNodeB, false},
		{"an outside client", "203.0.113.9", false},
	} {
		in := ipv4(protoTCP, c.src, nodeIP).withDst(nodeIP, 10250).build()
		pc := progCase{name: c.name, endpoints: seedB, tunnels: seedTunnelB, ctx: fromUplink, in: in,
			verdict: tcActOK, reason: "PASS_STACK"}
		if c.pod && mode == TunnelPodToNodeEnforce {
			pc.verdict, pc.reason = tcActShot, "DROP_SPOOFED_SOURCE"
		}
		before, err := counter(d, "from-netdev", "PLAIN_POD_TO_NODE")
		if err != nil {
			t.Fatal(err)
		}
		runCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", []progCase{pc})
		after, err := counter(d, "from-netdev", "PLAIN_POD_TO_NODE")
		if err != nil {
			t.Fatal(err)
		}
		var want uint64
		if c.pod && mode == TunnelPodToNodeEncapsulate {
			want = 1
		}
		if got := after.Packets - before.Packets; got != want {
			t.Errorf("%s: PLAIN_POD_TO_NODE grew by %d, want %d", c.name, got, want)
		}
	}
}

// Where the stack delivers into a pod (myelin_to_pod), enforce lets a pod of
// another node in only from the overlay: from any other device (a second
// network, a foreign decapsulating device) it was forged. Cluster addresses of
// no known PodCIDR, outside addresses and this node's pods are not this check's;
// plain and encapsulate check nothing here. Legacy host routing too (there the stack
// delivers what the overlay brings, from myelin_vxlan).
func TestPrivilegedBPFToPodTunnelEnforce(t *testing.T) {
	requirePrivileged(t)
	fromDevice := &skbCtx{IngressIfindex: 2}
	fromOverlay := &skbCtx{IngressIfindex: testOverlayIfIndex}
	toA := func(src string) []byte { return ipv4(protoTCP, src, podA).withDst(podA, 8080).build() }
	for _, tc := range []struct {
		routing HostRouting
		mode    TunnelPodToNode
	}{
		{HostRoutingBPF, TunnelPodToNodePlain}, {HostRoutingBPF, TunnelPodToNodeEncapsulate}, {HostRoutingBPF, TunnelPodToNodeEnforce},
		{HostRoutingLegacy, TunnelPodToNodeEnforce},
	} {
		mode := tc.mode
		t.Run(tc.routing.String()+"/"+mode.String(), func(t *testing.T) {
			d := loadTunnelPodToNodeRouting(t, mode, tc.routing)
			var cases []progCase
			for _, c := range []struct {
				name, src string
				ctx       *skbCtx
				forged    bool
			}{
				{"a pod of node B from the overlay", "10.2.0.5", fromOverlay, false},
				{"a pod of node B from another device", "10.2.0.5", fromDevice, true},
				{"a cluster address of no node's PodCIDR from another device", "10.3.9.9", fromDevice, false},
				{"an outside address from another device", "203.0.113.9", fromDevice, false},
			} {
				pc := progCase{name: c.name, endpoints: seedAB, tunnels: seedTunnelB, in: toA(c.src), ctx: c.ctx,
					verdict: tcActOK, reason: "PASS_STACK"}
				if c.forged && mode == TunnelPodToNodeEnforce {
					pc.verdict, pc.reason = tcActShot, "DROP_SPOOFED_SOURCE"
				}
				cases = append(cases, pc)
			}
			runCases(t, d, d.objs.MyelinToPod, "to-pod", cases)
		})
	}
}

// The tunnel node map: written, listed, deleted; non-unicast and IPv6 refused.
func TestPrivilegedTunnelNodes(t *testing.T) {
	requirePrivileged(t)
	d := loadTunnelPodToNode(t, TunnelPodToNodeEncapsulate)
	if err := d.UpsertTunnelNode(mustAddr("198.51.100.3")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"0.0.0.0", "255.255.255.255", "224.0.0.1", "2001:db8::1"} {
		if err := d.UpsertTunnelNode(netip.MustParseAddr(bad)); err == nil {
			t.Errorf("UpsertTunnelNode(%s) accepted", bad)
		}
	}
	if err := d.DeleteTunnelNode(mustAddr(tunnelNodeB)); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteTunnelNode(mustAddr(tunnelNodeB)); err != nil {
		t.Errorf("deleting an absent node: %v", err)
	}
	got, err := d.TunnelNodes()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[198.51.100.3]" {
		t.Errorf("TunnelNodes() = %v, want [198.51.100.3]", got)
	}
}

// The key needs tunnel mode (in native routing there is no overlay), in either host
// routing mode; and only its three values exist.
func TestLoadTunnelPodToNodeRefused(t *testing.T) {
	base := Config{PinDir: "/nonexistent", Tunnel: true, OverlayIfIndex: testOverlayIfIndex, OverlayMAC: testOverlayMAC,
		NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR}
	legacy := base
	legacy.HostRouting, legacy.TunnelPodToNode = HostRoutingLegacy, TunnelPodToNodeEnforce
	if _, err := Load(legacy); err == nil || strings.Contains(err.Error(), "TunnelPodToNode") {
		t.Errorf("Load with legacy host routing and enforce: err = %v, want it past the key's checks (to the pin dir)", err)
	}
	native := base
	native.HostRouting, native.Tunnel, native.TunnelPodToNode = HostRoutingBPF, false, TunnelPodToNodeEnforce
	if _, err := Load(native); err == nil || !strings.Contains(err.Error(), "tunnel mode") {
		t.Errorf("Load in native routing with enforce: err = %v, want one naming tunnel mode", err)
	}
	bad := base
	bad.HostRouting, bad.TunnelPodToNode = HostRoutingBPF, 3
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "TunnelPodToNode") {
		t.Errorf("Load with TunnelPodToNode 3: err = %v, want one naming TunnelPodToNode", err)
	}
}
