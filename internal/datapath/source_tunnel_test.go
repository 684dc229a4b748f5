package datapath

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// IP protocols that carry a whole packet: a node's decapsulating device
// (tunl0, sit0, gre0) unwraps them.
const (
	protoIPIP = 4
	protoIPv6 = 41 // 6in4
	protoGRE  = 47
)

// Tunnel fixtures: another node's IP, and a non-masquerade CIDR address.
const (
	otherNodeIP = "192.168.0.12"
	nonMasqHost = "198.51.100.7"
)

// tunnelNoMasq is the agent's no-masquerade set for these tests: the cluster
// CIDR, a non-masquerade CIDR and both nodes' IPs.
var tunnelNoMasq = append([]netip.Prefix{netip.MustParsePrefix(otherNodeIP + "/32")}, testNoMasq...)

// tunnelled is pod A's packet of protocol proto to dst carrying inner: an
// IPv4 packet from a forged source (IPIP, GRE) or an IPv6 one (6in4).
func tunnelled(proto uint8, dst string) pkt {
	inner := ipv4(protoTCP, "10.1.0.99", podBIP).withSrc(nodeIP, 40000).build()[14:]
	switch proto {
	case protoGRE:
		inner = append([]byte{0, 0, 0x08, 0x00}, inner...) // GRE, protocol IPv4
	case protoIPv6:
		inner = ipv6Frame()[14:]
	}
	p := ipv4(proto, podA, dst)
	p.payload = inner
	return p
}

// A pod's IPIP, 6in4 and GRE packets to an address inside the cluster (a
// node's, a pod's, a non-masquerade CIDR's) are dropped: a decapsulating
// device myelin did not make would deliver their inner packets, whose
// sources nothing checked. To outside addresses they pass (a VPN pod), and
// TCP and UDP are not touched.
func TestPrivilegedBPFSourceTunnel(t *testing.T) {
	requirePrivileged(t)
	protos := []struct {
		name  string
		proto uint8
	}{{"IPIP", protoIPIP}, {"6in4", protoIPv6}, {"GRE", protoGRE}}
	plain := []struct {
		name  string
		proto uint8
	}{{"TCP", protoTCP}, {"UDP", protoUDP}}
	inside := []struct{ name, dst string }{
		{"this node", nodeIP}, {"another node", otherNodeIP}, {"pod B", podBIP},
		{"a remote pod", remoteIP}, {"a non-masquerade CIDR", nonMasqHost},
	}
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
			if err := d.SetNoMasquerade(tunnelNoMasq); err != nil {
				t.Fatal(err)
			}
			var cases []progCase
			for _, p := range protos {
				for _, in := range inside {
					cases = append(cases, progCase{name: p.name + " to " + in.name, endpoints: seedAB,
						in: tunnelled(p.proto, in.dst).build(), verdict: tcActShot, reason: "DROP_POD_TUNNEL"})
				}
			}
			for _, l4 := range plain {
				pod := ipv4(l4.proto, podA, podBIP)
				c := progCase{name: l4.name + " to pod B", endpoints: seedAB, in: pod.build(), verdict: tcActRedirect, out: delivered(pod), reason: "FORWARDED"}
				if routing == HostRoutingLegacy {
					c.verdict, c.out, c.reason = tcActOK, nil, "PASS_STACK"
				}
				cases = append(cases, c)
			}
			// Legacy hands what passes to the stack, whatever the
			// destination: no route of the test's netns decides.
			if routing == HostRoutingLegacy {
				for _, p := range protos {
					cases = append(cases, progCase{name: p.name + " to an outside address passes", endpoints: seedAB,
						in: tunnelled(p.proto, extHost).build(), verdict: tcActOK, reason: "PASS_STACK"})
				}
				for _, l4 := range plain {
					cases = append(cases, progCase{name: l4.name + " to the node passes", endpoints: seedAB,
						in: ipv4(l4.proto, podA, nodeIP).build(), verdict: tcActOK, reason: "PASS_STACK"})
				}
			}
			runCases(t, d, d.objs.MyelinFromPod, "from-pod", cases)
		})
	}
}

// enable-source-ip-verification false (only for measuring its cost): the
// tunnel check is off with the other source checks.
func TestPrivilegedBPFSourceTunnelOff(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NoSourceVerification: true,
		NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
	runCases(t, d, d.objs.MyelinFromPod, "from-pod", []progCase{
		{name: "IPIP to the node passes", endpoints: seedAB, in: tunnelled(protoIPIP, nodeIP).build(), verdict: tcActOK, reason: "PASS_STACK"},
	})
}

// A pod's tunnel packet to any address of its node is dropped, not only to
// node_ip: here 192.168.77.1, the FIB lab's second uplink, which no map names.
// With forwarding off on the pod's veth the node could only take it for
// itself, so it is dropped too; beyond the lab's gateway it is forwarded.
func TestPrivilegedBPFSourceTunnelLocalAddress(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
	if err := d.SetNoMasquerade(tunnelNoMasq); err != nil {
		t.Fatal(err)
	}
	inNetns(t, func(string) {
		lab, err := setupFIBLab()
		if err != nil {
			t.Error(err)
			return
		}
		// A VPN peer outside the cluster (testClusterCIDR is 10/8).
		if err := netlink.RouteAdd(&netlink.Route{Dst: cidr("203.0.113.0/24"), Gw: net.ParseIP("192.168.77.2"), LinkIndex: lab.out}); err != nil {
			t.Errorf("add route: %v", err)
			return
		}
		ctx := &skbCtx{IngressIfindex: uint32(lab.in), Ifindex: uint32(lab.in)}
		sender := podASender
		sender.IfIndex = lab.in
		seed := map[string]EndpointInfo{podA: sender, podBIP: podB}
		row := func(name string, p pkt, verdict uint32, out []byte, reason string) progCase {
			return progCase{name: name, endpoints: seed, in: p.build(), ctx: ctx, verdict: verdict, out: out, reason: reason}
		}
		for _, forwarding := range []bool{true, false} {
			if err := setForwarding(forwarding); err != nil {
				t.Errorf("set forwarding: %v", err)
				return
			}
			for _, proto := range []uint8{protoIPIP, protoIPv6, protoGRE} {
				local := tunnelled(proto, "192.168.77.1")
				outside := tunnelled(proto, "203.0.113.5")
				cases := []progCase{row(fmt.Sprintf("proto %d to a second uplink's address", proto), local, tcActShot, nil, "DROP_POD_TUNNEL")}
				if forwarding {
					cases = append(cases, row(fmt.Sprintf("proto %d beyond the gateway", proto), outside, tcActRedirect,
						outside.withTTL(outside.ttl-1).build(), "FORWARDED"))
				} else {
					cases = append(cases, row(fmt.Sprintf("proto %d, forwarding off", proto), outside, tcActShot, nil, "DROP_POD_TUNNEL"))
				}
				for _, c := range cases {
					if err := checkCase(d, d.objs.MyelinFromPod, "from-pod", c); err != nil {
						t.Errorf("forwarding %v: %v", forwarding, err)
					}
				}
			}
		}
	})
}
