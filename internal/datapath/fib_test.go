package datapath

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fibLab is a netns in which from_pod's FIB lookups have real answers:
// packets "arrive" on veth dpin (ingress_ifindex in the test-run context)
// and leave through veth dpout (192.168.77.1/24, MTU 1280) towards a
// gateway 192.168.77.2 with a permanent neighbour entry.
type fibLab struct {
	in, out int // ifindexes
}

func setupFIBLab() (fibLab, error) {
	var lab fibLab
	// A veth, not a dummy: the dummy driver may not be built.
	in := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dpin"}, PeerName: "dpin-peer"}
	out := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dpout", MTU: 1280}, PeerName: "dpout-peer"}
	for _, l := range []netlink.Link{in, out} {
		if err := netlink.LinkAdd(l); err != nil {
			return lab, fmt.Errorf("add link %s: %w", l.Attrs().Name, err)
		}
	}
	for _, name := range []string{"dpin", "dpin-peer", "dpout", "dpout-peer"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return lab, err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return lab, fmt.Errorf("set %s up: %w", name, err)
		}
	}
	dpout, err := netlink.LinkByName("dpout")
	if err != nil {
		return lab, err
	}
	addr, _ := netlink.ParseAddr("192.168.77.1/24")
	if err := netlink.AddrAdd(dpout, addr); err != nil {
		return lab, fmt.Errorf("add address: %w", err)
	}
	err = netlink.NeighAdd(&netlink.Neigh{LinkIndex: dpout.Attrs().Index, Family: unix.AF_INET,
		State: netlink.NUD_PERMANENT, IP: net.ParseIP("192.168.77.2"), HardwareAddr: mac("02:77:00:00:00:02")})
	if err != nil {
		return lab, fmt.Errorf("add neighbour: %w", err)
	}
	routes := []netlink.Route{
		{Dst: cidr("10.200.0.0/24"), Gw: net.ParseIP("192.168.77.2"), LinkIndex: dpout.Attrs().Index},
		{Dst: cidr("10.201.0.0/24"), Type: unix.RTN_BLACKHOLE},
		{Dst: cidr("10.202.0.0/24"), Type: unix.RTN_UNREACHABLE},
		{Dst: cidr("10.203.0.0/24"), Type: unix.RTN_PROHIBIT},
	}
	for _, r := range routes {
		if err := netlink.RouteAdd(&r); err != nil {
			return lab, fmt.Errorf("add route %s: %w", r.Dst, err)
		}
	}
	dpin, err := netlink.LinkByName("dpin")
	if err != nil {
		return lab, err
	}
	return fibLab{in: dpin.Attrs().Index, out: dpout.Attrs().Index}, nil
}

func cidr(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// setForwarding sets IPv4 forwarding in the calling thread's netns.
func setForwarding(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte(v), 0o644)
}

// From_pod's non-endpoint path against a real FIB. In BPF_PROG_TEST_RUN,
// bpf_fib_lookup answers from the caller's netns with the context's
// ingress_ifindex; bpf_redirect_neigh returns TC_ACT_REDIRECT without
// transmitting, so the frame comes out with the TTL decremented and the
// MACs untouched (the kernel writes them at transmit). In tunnel mode, a
// destination outside every PodCIDR of the tunnel map gets the same answers.
func TestPrivilegedBPFFromPodFIB(t *testing.T) {
	requirePrivileged(t)
	for _, tunnel := range []bool{false, true} {
		name := "native"
		if tunnel {
			name = "tunnel"
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{HostRouting: HostRoutingBPF}
			if tunnel {
				cfg.Tunnel, cfg.OverlayIfIndex, cfg.OverlayMAC, cfg.NodeIP = true, testOverlayIfIndex, testOverlayMAC, testNodeIP
			}
			d := loadTestConfig(t, cfg)
			fromPodFIB(t, d)
		})
	}
}

// fromPodFIB runs the FIB table against d in a throwaway netns.
func fromPodFIB(t *testing.T, d *Datapath) {
	inNetns(t, func(string) {
		lab, err := setupFIBLab()
		if err != nil {
			t.Error(err)
			return
		}
		ctx := &skbCtx{IngressIfindex: uint32(lab.in), Ifindex: uint32(lab.in)}
		// Pod A sends from the lab's ingress device.
		sender := podASender
		sender.IfIndex = lab.in
		seed := map[string]EndpointInfo{podA: sender, podBIP: podB}
		viaGW := ipv4(protoTCP, "10.1.0.10", "10.200.0.5")
		toLocal := ipv4(protoUDP, "10.1.0.10", "10.1.0.20")
		onLink := ipv4(protoUDP, "10.1.0.10", "192.168.77.9")
		big, bigOnLink := viaGW, onLink
		big.payload = make([]byte, 1400)
		bigOnLink.payload = make([]byte, 1400)
		row := func(name string, p pkt, verdict uint32, out []byte, reason string) progCase {
			return progCase{name: name, endpoints: seed, tunnels: seedTunnelB, in: p.build(), ctx: ctx, verdict: verdict, out: out, reason: reason}
		}
		decTTL := func(p pkt) []byte { return p.withTTL(p.ttl - 1).build() }

		tables := []struct {
			forwarding bool
			cases      []progCase
		}{
			{false, []progCase{
				row("forwarding disabled: FWD_DISABLED to stack", viaGW, tcActOK, nil, "PASS_STACK"),
			}},
			{true, []progCase{
				row("via gateway with neighbour: SUCCESS", viaGW, tcActRedirect, decTTL(viaGW), "FORWARDED"),
				row("on-link without neighbour: redirect_neigh resolves it", onLink, tcActRedirect, decTTL(onLink), "FORWARDED"),
				// The patched checksum is 0x0000, not 0xffff (RFC 1624), forwarded
				// (ipv4_dec_ttl) and delivered (ipv4_route_hop); and one whose patch
				// carries into the high byte.
				row("header checksum 0xfeff", viaGW.withHeaderChecksum(0xfeff), tcActRedirect,
					decTTL(viaGW.withHeaderChecksum(0xfeff)), "FORWARDED"),
				row("header checksum 0xff00", viaGW.withHeaderChecksum(0xff00), tcActRedirect,
					decTTL(viaGW.withHeaderChecksum(0xff00)), "FORWARDED"),
				row("local endpoint, header checksum 0xfeff", toLocal.withHeaderChecksum(0xfeff), tcActRedirect,
					delivered(toLocal.withHeaderChecksum(0xfeff)), "FORWARDED"),
				row("on-link without neighbour, beyond egress MTU: FRAG_NEEDED to stack", bigOnLink, tcActOK, nil, "PASS_STACK"),
				row("TTL 1 via gateway: stack sends time exceeded", viaGW.withTTL(1), tcActOK, nil, "PASS_STACK"),
				row("beyond egress MTU: FRAG_NEEDED to stack", big, tcActOK, nil, "PASS_STACK"),
				row("blackhole route: BLACKHOLE dropped", ipv4(protoUDP, "10.1.0.10", "10.201.0.1"), tcActShot, nil, "DROP_NO_ROUTE"),
				row("unreachable route: stack sends ICMP", ipv4(protoUDP, "10.1.0.10", "10.202.0.1"), tcActOK, nil, "PASS_STACK"),
				row("prohibit route: stack sends ICMP", ipv4(protoUDP, "10.1.0.10", "10.203.0.1"), tcActOK, nil, "PASS_STACK"),
				row("node address: NOT_FWDED to stack", ipv4(protoTCP, "10.1.0.10", "192.168.77.1"), tcActOK, nil, "PASS_STACK"),
				row("local endpoint wins over FIB", toLocal, tcActRedirect, delivered(toLocal), "FORWARDED"),
			}},
		}
		for _, tab := range tables {
			if err := setForwarding(tab.forwarding); err != nil {
				t.Errorf("set forwarding: %v", err)
				return
			}
			for _, c := range tab.cases {
				if err := checkCase(d, d.objs.MyelinFromPod, "from-pod", c); err != nil {
					t.Error(err)
				}
			}
		}
		if err := checkNoRouteEvent(d, ctx); err != nil {
			t.Error(err)
		}
	})
}

// checkNoRouteEvent checks that the drop event of a blackholed TCP packet carries its flow.
func checkNoRouteEvent(d *Datapath, ctx *skbCtx) error {
	r, err := d.NewEventReader()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := drainEvents(r); err != nil {
		return err
	}
	in := ipv4(protoTCP, "10.1.0.10", "10.201.0.1").build()
	if _, err := d.objs.MyelinFromPod.Run(&ebpf.RunOptions{Data: in, Context: *ctx}); err != nil {
		return err
	}
	ev, err := nextEvent(r, time.Second)
	if err != nil {
		return err
	}
	want := Event{Type: "drop", Reason: "DROP_NO_ROUTE", Direction: "from-pod", IfIndex: int(ctx.Ifindex),
		Src: mustAddr("10.1.0.10"), Dst: mustAddr("10.201.0.1"), Proto: protoTCP,
		SrcPort: 40000, DstPort: 8080, Len: uint32(len(in))}
	if ev != want {
		return fmt.Errorf("no-route event = %+v, want %+v", ev, want)
	}
	return nil
}
