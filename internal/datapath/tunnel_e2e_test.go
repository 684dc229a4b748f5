package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// An end-to-end tunnel lab: two "nodes" (netns) joined by a veth underlay
// on 198.51.100.0/24, each with a collect-metadata myelin_vxlan device, a
// loaded tunnel-mode datapath and one "pod" netns wired like myelin-cni
// wires pods (/32 address, default via 169.254.1.1, a permanent neighbour
// for it). Everything lives in dptest-* namespaces; the root netns is never
// touched.

const (
	tunnelPort  = 8472
	underlayDev = "dpul0"
	overlayDev  = "myelin_vxlan"
	podGateway  = "169.254.1.1"
)

// tunnelNode is one node of the lab.
type tunnelNode struct {
	ns, podNS     netns.NsHandle
	podNSName     string
	underlayIP    netip.Addr
	podCIDR       netip.Prefix
	podIP         netip.Addr
	hostVeth      string
	underlay, vx  int // ifindexes in ns
	hostIdx       int
	hostMAC, pMAC net.HardwareAddr
	d             *Datapath
	decap         bool // the programs encapsulate and decapsulate (TunnelPort set)
}

// The real proof of tunnel mode: pod A pings pod B across the overlay. Both
// directions go from_pod (encapsulate) -> VXLAN over the underlay ->
// delivery into the pod (bpf_redirect_peer), and the underlay carries UDP
// 8472 with the outer header from the tunnel key. Then hand-made VXLAN
// frames from known and unknown underlay addresses show which peers are
// accepted, and a TCP transfer of 4 MiB (GSO packets) must arrive whole.
// Twice: with the nodes' IPs and tunnel port configured, the programs
// encapsulate and decapsulate what they can themselves (the pings must
// bypass myelin_vxlan both ways); without, myelin_vxlan does it all.
func TestPrivilegedTunnelEndToEnd(t *testing.T) {
	requirePrivileged(t)
	testenv.RequireTools(t, "nsenter", "ping")
	for _, decap := range []bool{true, false} {
		name := "tunnel in BPF"
		if !decap {
			name = "tunnel by myelin_vxlan"
		}
		t.Run(name, func(t *testing.T) {
			pinA, pinB := testPinDir(t), testPinDir(t)
			inNetns(t, func(nameA string) {
				if err := tunnelEndToEnd(t, nameA, pinA, pinB, decap); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// tunnelEndToEnd runs the lab; the calling thread is in node A's netns nameA.
// decap configures the nodes for encapsulation and decapsulation in BPF (TunnelPort).
func tunnelEndToEnd(t *testing.T, nameA, pinA, pinB string, decap bool) error {
	a := &tunnelNode{podNSName: nameA + "-pod", underlayIP: mustAddr("198.51.100.1"),
		podCIDR: netip.MustParsePrefix("10.1.0.0/24"), podIP: mustAddr("10.1.0.10"), hostVeth: "dpvetha", decap: decap}
	b := &tunnelNode{podNSName: nameA + "-pod-b", underlayIP: mustAddr("198.51.100.2"),
		podCIDR: netip.MustParsePrefix("10.2.0.0/24"), podIP: mustAddr("10.2.0.20"), hostVeth: "dpvethb", decap: decap}
	var err error
	if a.ns, err = netns.Get(); err != nil {
		return err
	}
	defer a.ns.Close()
	nameB := nameA + "-b"
	for _, ns := range []struct {
		name string
		h    *netns.NsHandle
	}{{nameB, &b.ns}, {a.podNSName, &a.podNS}, {b.podNSName, &b.podNS}} {
		h, err := newNamedNetns(ns.name, a.ns)
		if err != nil {
			return err
		}
		defer deleteNamedNetns(t, ns.name, h)
		*ns.h = h
	}
	if err := wireUnderlay(a, b); err != nil {
		return err
	}
	for _, n := range []struct {
		node   *tunnelNode
		pinDir string
		peer   *tunnelNode
	}{{a, pinA, b}, {b, pinB, a}} {
		if err := inNode(n.node.ns, func() error { return setupTunnelNode(n.node, n.pinDir, n.peer) }); err != nil {
			return err
		}
		defer n.node.d.Close()
	}
	if err := pingAcross(a, b); err != nil {
		return err
	}
	if err := injectVXLAN(a, b); err != nil {
		return err
	}
	return bulkAcross(t, a, b)
}

// newNamedNetns creates the netns name and moves the thread back to home.
func newNamedNetns(name string, home netns.NsHandle) (netns.NsHandle, error) {
	h, err := netns.NewNamed(name)
	if err != nil {
		return 0, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(home); err != nil {
		return 0, fmt.Errorf("return from netns %s: %w", name, err)
	}
	return h, nil
}

func deleteNamedNetns(t *testing.T, name string, h netns.NsHandle) {
	h.Close()
	if err := netns.DeleteNamed(name); err != nil {
		t.Errorf("delete netns %s: %v", name, err)
	}
}

// inNode runs fn with the thread in ns. The thread stays there afterwards:
// the caller runs on a thread inNetns discards.
func inNode(ns netns.NsHandle, fn func() error) error {
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("enter netns: %w", err)
	}
	return fn()
}

// wireUnderlay joins the nodes with a veth pair named dpul0 on both ends.
func wireUnderlay(a, b *tunnelNode) error {
	if err := netns.Set(a.ns); err != nil {
		return err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: underlayDev}, PeerName: underlayDev,
		PeerNamespace: netlink.NsFd(int(b.ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add underlay veth: %w", err)
	}
	return nil
}

// setupTunnelNode configures the node whose netns the thread is in: underlay
// address, myelin_vxlan, the pod, the datapath with its maps and links.
func setupTunnelNode(n *tunnelNode, pinDir string, peer *tunnelNode) error {
	var err error
	if n.underlay, err = upWithAddr(underlayDev, netip.PrefixFrom(n.underlayIP, 24)); err != nil {
		return err
	}
	if _, err := upWithAddr("lo", netip.Prefix{}); err != nil {
		return err
	}
	vx := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: overlayDev, HardwareAddr: OverlayMAC(n.underlayIP)}, FlowBased: true, Port: tunnelPort}
	if err := netlink.LinkAdd(vx); err != nil {
		return fmt.Errorf("add %s: %w", overlayDev, err)
	}
	if n.vx, err = upWithAddr(overlayDev, netip.Prefix{}); err != nil {
		return err
	}
	if err := addTestPod(n); err != nil {
		return err
	}
	cfg := Config{PinDir: pinDir, HostRouting: HostRoutingBPF, Tunnel: true, OverlayIfIndex: n.vx, OverlayMAC: OverlayMAC(n.underlayIP),
		NodeIP: n.underlayIP}
	if n.decap {
		cfg.TunnelPort = tunnelPort
		// The FIB routes the outer packet for forwarding interfaces only (a
		// node forwards its pods' traffic: Kubernetes nodes have it on).
		if err := setForwarding(true); err != nil {
			return err
		}
	}
	n.d, err = Load(cfg)
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return fmt.Errorf("load: %+v", verr)
		}
		return fmt.Errorf("load: %+v", err)
	}
	ep := EndpointInfo{IfIndex: n.hostIdx, PodMAC: n.pMAC, HostMAC: n.hostMAC, ID: 1}
	if err := n.d.UpsertEndpoint(n.podIP, ep); err != nil {
		return err
	}
	if err := n.d.UpsertTunnel(peer.podCIDR, peer.underlayIP); err != nil {
		return err
	}
	if err := n.d.AttachNetdev(n.underlay, underlayDev); err != nil {
		return err
	}
	if err := n.d.AttachOverlay(n.vx, overlayDev); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(pinDir, "links", "overlay-"+overlayDev)); err != nil {
		return fmt.Errorf("overlay link pin: %w", err)
	}
	if _, err := expectOnly(n.vx, n.d.objs.MyelinFromOverlay); err != nil {
		return err
	}
	return n.d.AttachEndpoint(n.hostIdx, n.hostVeth)
}

// upWithAddr sets name up, with addr if valid, and returns its ifindex.
func upWithAddr(name string, addr netip.Prefix) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	if addr.IsValid() {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}}
		if err := netlink.AddrAdd(l, a); err != nil {
			return 0, fmt.Errorf("add %s to %s: %w", addr, name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return 0, fmt.Errorf("set %s up: %w", name, err)
	}
	return l.Attrs().Index, nil
}

// addTestPod creates the pod's veth (eth0 in podNS, hostVeth in the node)
// and configures eth0 as myelin-cni does.
func addTestPod(n *tunnelNode) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.hostVeth}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(int(n.podNS))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add pod veth: %w", err)
	}
	host, err := netlink.LinkByName(n.hostVeth)
	if err != nil {
		return err
	}
	n.hostIdx, n.hostMAC = host.Attrs().Index, host.Attrs().HardwareAddr
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	pod, err := netlink.NewHandleAt(n.podNS)
	if err != nil {
		return err
	}
	defer pod.Close()
	eth0, err := pod.LinkByName("eth0")
	if err != nil {
		return err
	}
	n.pMAC = eth0.Attrs().HardwareAddr
	return configureTestPod(pod, eth0, n.podIP, n.hostMAC)
}

// configureTestPod gives eth0 ip/32 and a default route via the link-local
// gateway, whose MAC (the host veth's) is a permanent neighbour: pods never ARP.
func configureTestPod(h *netlink.Handle, eth0 netlink.Link, ip netip.Addr, gwMAC net.HardwareAddr) error {
	idx := eth0.Attrs().Index
	gw := net.ParseIP(podGateway)
	steps := []func() error{
		func() error {
			return h.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}})
		},
		func() error { return h.LinkSetUp(eth0) },
		func() error {
			return h.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
		},
		func() error {
			return h.NeighAdd(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, IP: gw, HardwareAddr: gwMAC})
		},
		func() error { return h.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: gw}) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("configure pod %s, step %d: %w", ip, i+1, err)
		}
	}
	return nil
}

// pingAcross pings pod B from pod A while capturing node B's underlay, then
// checks replies, counters and the VXLAN frames on the wire.
func pingAcross(a, b *tunnelNode) error {
	var capFD int
	err := inNode(b.ns, func() (err error) {
		capFD, err = openCapture(b.underlay)
		return err
	})
	if err != nil {
		return err
	}
	defer unix.Close(capFD)

	const count = 3
	out, err := exec.Command("nsenter", "--net=/run/netns/"+a.podNSName, "ping", "-n", "-c", fmt.Sprint(count),
		"-i", "0.2", "-w", "10", b.podIP.String()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from pod A: %w\n%s", b.podIP, err, out)
	}
	// TTL 64 -1 (from_pod on node B) -1 (from_overlay on node A).
	if !strings.Contains(string(out), fmt.Sprintf("%d received", count)) || !strings.Contains(string(out), "ttl=62") {
		return fmt.Errorf("ping output: want %d replies with ttl=62 (two BPF hops):\n%s", count, out)
	}
	if err := checkTunnelCounters(a, b, count); err != nil {
		return err
	}
	for _, n := range []*tunnelNode{a, b} {
		if err := inNode(n.ns, func() error { return checkOverlayDevice(count, n.decap) }); err != nil {
			return fmt.Errorf("node %s: %w", n.underlayIP, err)
		}
	}
	return checkWire(capFD, a, b)
}

// checkTunnelCounters: each node encapsulated its side's packets (from-pod)
// and delivered the other's (from-overlay), all FORWARDED.
func checkTunnelCounters(a, b *tunnelNode, count uint64) error {
	for _, c := range []struct {
		node, dir string
		d         *Datapath
	}{{"A", "from-pod", a.d}, {"B", "from-overlay", b.d}, {"B", "from-pod", b.d}, {"A", "from-overlay", a.d}} {
		m, err := counter(c.d, c.dir, "FORWARDED")
		if err != nil {
			return err
		}
		if m.Packets < count {
			ms, _ := c.d.Metrics()
			return fmt.Errorf("node %s %s FORWARDED = %d packets, want >= %d; all counters: %+v", c.node, c.dir, m.Packets, count, ms)
		}
	}
	return nil
}

// checkOverlayDevice checks who encapsulated and decapsulated count packets
// each way in the current netns: myelin_vxlan (at least count tx and rx
// packets), or with decap the programs (no packet touched the device).
func checkOverlayDevice(count uint64, decap bool) error {
	l, err := netlink.LinkByName(overlayDev)
	if err != nil {
		return err
	}
	st := l.Attrs().Statistics
	switch {
	case st == nil:
		return fmt.Errorf("%s has no statistics", overlayDev)
	case decap && (st.RxPackets != 0 || st.TxPackets != 0):
		return fmt.Errorf("%s statistics %+v: want 0 tx and rx packets, the programs encapsulate and decapsulate", overlayDev, st)
	case !decap && (st.RxPackets < count || st.TxPackets < count):
		return fmt.Errorf("%s statistics %+v: want >= %d tx and rx packets", overlayDev, st, count)
	}
	return nil
}

// openCapture opens a non-blocking packet socket on ifindex (current netns).
func openCapture(ifindex int) (int, error) {
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return 0, fmt.Errorf("open packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("bind packet socket: %w", err)
	}
	return fd, nil
}

// checkWire reads the captured underlay frames and requires a VXLAN-encapsulated
// echo request A->B and echo reply B->A with the outer header the tunnel key asked for.
func checkWire(fd int, a, b *tunnelNode) error {
	var seen []string
	req, rep := false, false
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			return fmt.Errorf("read capture: %w", err)
		}
		f, ok := parseVXLAN(buf[:n])
		if !ok {
			continue
		}
		seen = append(seen, f.String())
		req = req || f.matches(a, b, 8, 63)
		rep = rep || f.matches(b, a, 0, 63)
	}
	if !req || !rep {
		return fmt.Errorf("underlay capture on node B: echo request A->B seen %v, echo reply B->A seen %v; "+
			"want both as UDP %d, outer TTL 64, zero UDP checksum, VNI 0, inner TTL 63; VXLAN frames seen:\n%s",
			req, rep, tunnelPort, strings.Join(seen, "\n"))
	}
	return nil
}
