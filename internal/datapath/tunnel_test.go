package datapath

import (
	"bufio"
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
	return loadTestConfig(t, Config{HostRouting: routing, Tunnel: true, OverlayIfIndex: testOverlayIfIndex, OverlayMAC: testOverlayMAC})
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
