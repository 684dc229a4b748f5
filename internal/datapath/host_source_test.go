package datapath

import (
	"testing"
)

// ctxHostBuilt is the context of a packet the node's own stack built: no
// device received it (ingress_ifindex 0), as a host process's or a
// hostNetwork pod's.
var ctxHostBuilt = &skbCtx{}

// hostSourceOverlayMark is HOST_SOURCE_OVERLAY (bpf/lib/host_source.h), the
// mark bit myelin_to_overlay sets on what myelin_vxlan encapsulates.
const hostSourceOverlayMark = 0x00200000

// testNodeIPInCluster is the node's IP in these tests: inside the cluster
// CIDR, outside every PodCIDR, as routing.Peers allows.
const testNodeIPInCluster = "10.250.0.11"

// testHealthIP is the node's health address in these tests: in the cluster
// CIDR, and the node's own.
const testHealthIP = "10.1.0.1"

// What the node's own stack builds may not carry a pod's source, in both
// routing modes and wherever it leaves: the uplink (myelin_to_netdev), a pod
// of this node (myelin_to_pod), the VXLAN device (myelin_to_overlay). The
// same packets forwarded (received on a device) pass, as does what the node
// sends from its own address (here inside the cluster CIDR) or its health
// address.
func TestPrivilegedHostSourceCheck(t *testing.T) {
	requirePrivileged(t)
	for _, tunnel := range []bool{false, true} {
		name := "native"
		cfg := Config{HostRouting: HostRoutingBPF, NodeIP: mustAddr(testNodeIPInCluster), ClusterCIDR: testClusterCIDR, HealthIP: mustAddr(testHealthIP)}
		if tunnel {
			name = "tunnel"
			cfg.Tunnel, cfg.OverlayIfIndex, cfg.OverlayMAC, cfg.OverlayPort = true, testOverlayIfIndex, testOverlayMAC, tunnelPort
		}
		t.Run(name, func(t *testing.T) {
			d := loadTestConfig(t, cfg)
			forged := ipv4(protoUDP, podA, remoteIP)
			own := ipv4(protoUDP, testNodeIPInCluster, remoteIP)
			health := ipv4(protoTCP, testHealthIP, remoteIP)
			cases := []progCase{
				{name: "host-built from the node's health address: passes", in: health.build(), ctx: ctxHostBuilt,
					verdict: tcActOK, reason: "PASS_STACK"},
				{name: "host-built from a pod address: dropped", in: forged.build(), ctx: ctxHostBuilt,
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"},
				{name: "host-built from the node's address: passes", in: own.build(), ctx: ctxHostBuilt,
					verdict: tcActOK, reason: "PASS_STACK"},
				{name: "host-built from the hairpin address: dropped", in: ipv4(protoUDP, "169.254.42.1", remoteIP).build(), ctx: ctxHostBuilt,
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"},
				{name: "forwarded from a pod address: passes", in: forged.build(), ctx: ctxForwarded,
					verdict: tcActOK, reason: "PASS_STACK"},
			}
			runCases(t, d, d.objs.MyelinToNetdev, "to-netdev", cases)
			toPod := []progCase{
				{name: "host-built into a pod from a pod address: dropped", in: ipv4(protoTCP, podBIP, podA).build(), ctx: ctxHostBuilt,
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"},
				{name: "host-built into a pod from the node's address (a probe): passes", in: ipv4(protoTCP, testNodeIPInCluster, podA).build(), ctx: ctxHostBuilt,
					verdict: tcActOK, reason: "PASS_STACK"},
				{name: "forwarded into a pod from a pod address: passes", in: ipv4(protoTCP, podBIP, podA).build(), ctx: ctxForwarded,
					verdict: tcActOK, reason: "PASS_STACK"},
			}
			runCases(t, d, d.objs.MyelinToPod, "to-pod", toPod)
			if !tunnel {
				return
			}
			runCases(t, d, d.objs.MyelinToOverlay, "to-netdev", []progCase{
				{name: "host-built into the overlay from a pod address: dropped", in: forged.build(), ctx: ctxHostBuilt,
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"},
			})
			// What myelin_to_overlay passes is counted where it came from, not there.
			wantRun(t, d.objs.MyelinToOverlay, own, ctxHostBuilt, tcActOK, own.build(), "host-built into the overlay from the node's address")
			wantRun(t, d.objs.MyelinToOverlay, health, ctxHostBuilt, tcActOK, health.build(), "host-built into the overlay from the health address")
			wantRun(t, d.objs.MyelinToOverlay, forged, ctxForwarded, tcActOK, forged.build(), "forwarded into the overlay from a pod address")
			// VXLAN the node's stack built itself (a UDP socket to another node's
			// tunnel port) with an inner source of this node's pod: the other node's
			// peer rule would accept it, the outer source being right.
			inner := ipv4(protoUDP, podA, remoteIP).withMACs(testOverlayMAC, OverlayMAC(mustAddr("192.168.0.12")))
			vxlan := ipv4(protoUDP, nodeIP, "192.168.0.12").withDst("192.168.0.12", tunnelPort)
			vxlan.payload = vxlanPayload(0, inner.build())
			other := vxlan.withDst("192.168.0.12", tunnelPort+1)
			runCases(t, d, d.objs.MyelinToNetdev, "to-netdev", []progCase{
				{name: "host-built UDP to the tunnel port: dropped", in: vxlan.build(), ctx: ctxHostBuilt,
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"},
				{name: "host-built UDP to the tunnel port that myelin_to_overlay marked (the device's): passes", in: vxlan.build(),
					ctx: &skbCtx{Mark: hostSourceOverlayMark}, verdict: tcActOK, reason: "PASS_STACK"},
				{name: "host-built UDP to another port: passes", in: other.build(), ctx: ctxHostBuilt,
					verdict: tcActOK, reason: "PASS_STACK"},
				{name: "VXLAN encapsulated in BPF (received on a pod's veth): passes", in: vxlan.build(), ctx: ctxForwarded,
					verdict: tcActOK, reason: "PASS_STACK"},
			})
		})
	}
}

// With source validation off (enable-source-ip-verification false) the
// node's own packets are not checked either.
func TestPrivilegedHostSourceCheckOff(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR,
		Tunnel: true, OverlayIfIndex: testOverlayIfIndex, OverlayMAC: testOverlayMAC, OverlayPort: tunnelPort,
		NoSourceVerification: true})
	vxlan := ipv4(protoUDP, nodeIP, "192.168.0.12").withDst("192.168.0.12", tunnelPort)
	runCases(t, d, d.objs.MyelinToNetdev, "to-netdev", []progCase{
		{name: "host-built from a pod address", in: ipv4(protoUDP, podA, remoteIP).build(), ctx: ctxHostBuilt,
			verdict: tcActOK, reason: "PASS_STACK"},
		{name: "host-built UDP to the tunnel port", in: vxlan.build(), ctx: ctxHostBuilt,
			verdict: tcActOK, reason: "PASS_STACK"},
	})
	runCases(t, d, d.objs.MyelinToPod, "to-pod", []progCase{
		{name: "host-built into a pod from a pod address", in: ipv4(protoTCP, podBIP, podA).build(), ctx: ctxHostBuilt,
			verdict: tcActOK, reason: "PASS_STACK"},
	})
}
