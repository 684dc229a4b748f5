package datapath

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// Masquerade fixtures: pods of 10.0.0.0/8 (this node's 10.1.0.0/24) on the node 192.168.0.11 talk to
// the lab's external host 203.0.113.10. 198.51.100.0/24 is a
// non-masquerade CIDR.
var (
	testNodeIP      = mustAddr("192.168.0.11")
	testClusterCIDR = netip.MustParsePrefix("10.0.0.0/8")
	testNoMasq      = []netip.Prefix{testClusterCIDR, netip.MustParsePrefix("198.51.100.0/24"), netip.PrefixFrom(testNodeIP, 32)}
	// seedA makes pod A (10.1.0.10) local, with pod B's veth, so delivered() fits it.
	seedA = map[string]EndpointInfo{"10.1.0.10": podB}
)

const (
	extHost = "203.0.113.10"
	podA    = "10.1.0.10"
	nodeIP  = "192.168.0.11"
	router  = "198.18.0.1" // sends ICMP errors about our packets
)

// natCase is a program row plus the NAT flows before (seed) and after (want).
type natCase struct {
	progCase
	seed []NATEntry
	want []NATEntry // nil: not checked; LastSeen is ignored
}

// testNATPort is the one NAT port of loadMasq and loadLB datapaths, so rows
// know the port a new flow gets.
const testNATPort = 61000

// loadMasq loads a datapath with masquerade on and the no-masquerade set,
// translating to the one port testNATPort.
func loadMasq(t *testing.T, routing HostRouting, natMax uint32) *Datapath {
	t.Helper()
	return loadMasqPorts(t, routing, natMax, testNATPort, testNATPort)
}

// loadMasqPorts is loadMasq translating to ports lo..hi.
func loadMasqPorts(t *testing.T, routing HostRouting, natMax uint32, lo, hi uint16) *Datapath {
	t.Helper()
	d := loadTestConfig(t, Config{HostRouting: routing, Masquerade: true, NodeIP: testNodeIP,
		ClusterCIDR: testClusterCIDR, NATMax: natMax, NATPortMin: lo, NATPortMax: hi})
	if err := d.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	return d
}

// runNATCases runs each row as a subtest with the NAT map holding exactly its seed.
func runNATCases(t *testing.T, d *Datapath, prog *ebpf.Program, dir string, cases []natCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := seedNAT(d, c.seed, time.Duration(0)); err != nil {
				t.Fatal(err)
			}
			if err := checkCase(d, prog, dir, c.progCase); err != nil {
				t.Error(err)
			}
			if c.want != nil {
				if err := checkNAT(d, c.want); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// seedNAT makes myelin_snat hold exactly flows (both entries each), last
// seen at lastSeen (0: now) and in the flags their State names.
func seedNAT(d *Datapath, flows []NATEntry, lastSeen time.Duration) error {
	if err := clearNAT(d); err != nil {
		return err
	}
	if lastSeen == 0 {
		lastSeen = MonotonicNow()
	}
	for _, f := range flows {
		if err := putNATFlow(d, f, lastSeen); err != nil {
			return err
		}
	}
	return nil
}

// putNATFlow writes both entries of flow f, last seen at lastSeen.
func putNATFlow(d *Datapath, f NATEntry, lastSeen time.Duration) error {
	fk, fv, rk, rv := natEntriesOf(f, testNodeIP, lastSeen)
	if err := d.objs.MyelinSnat.Update(fk, fv, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("seed %+v: %w", f, err)
	}
	if err := d.objs.MyelinSnat.Update(rk, rv, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("seed %+v: %w", f, err)
	}
	return nil
}

// clearNAT empties myelin_snat.
func clearNAT(d *Datapath) error {
	var (
		k    myelinNatKey
		v    myelinNatEntry
		keys []myelinNatKey
	)
	it := d.objs.MyelinSnat.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := d.objs.MyelinSnat.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// natEntriesOf is the forward and reverse entry of flow f through node.
func natEntriesOf(f NATEntry, node netip.Addr, lastSeen time.Duration) (myelinNatKey, myelinNatEntry, myelinNatKey, myelinNatEntry) {
	var flags uint16
	switch f.State {
	case "tcp-established":
		flags = uint16(myelinNatFlagsNAT_F_REPLIED)
	case "tcp-closing":
		flags = uint16(myelinNatFlagsNAT_F_REPLIED | myelinNatFlagsNAT_F_CLOSING)
	}
	fk := myelinNatKey{Saddr: networkUint32(f.PodIP), Daddr: networkUint32(f.Dst), Sport: htons(f.PodPort),
		Dport: htons(f.DstPort), Proto: f.Proto, Dir: uint8(myelinNatDirNAT_DIR_EGRESS)}
	fv := myelinNatEntry{LastSeen: uint64(lastSeen), Addr: networkUint32(node), Port: htons(f.NATPort), Flags: flags}
	rk := myelinNatKey{Saddr: networkUint32(f.Dst), Daddr: networkUint32(node), Sport: htons(f.DstPort),
		Dport: htons(f.NATPort), Proto: f.Proto, Dir: uint8(myelinNatDirNAT_DIR_INGRESS)}
	rv := myelinNatEntry{LastSeen: uint64(lastSeen), Addr: networkUint32(f.PodIP), Port: htons(f.PodPort), Flags: flags}
	return fk, fv, rk, rv
}

// checkNAT compares the NAT flows with want, ignoring LastSeen (which must be set).
func checkNAT(d *Datapath, want []NATEntry) error {
	got, err := d.NATEntries()
	return checkFlows("NAT", got, err, want, func(e *NATEntry) *time.Duration { return &e.LastSeen })
}

// checkFlows compares the flows got (read with err) with want, ignoring their
// LastSeen (which must be set), what names the table.
func checkFlows[T comparable](what string, got []T, err error, want []T, lastSeen func(*T) *time.Duration) error {
	if err != nil {
		return err
	}
	for i := range got {
		if *lastSeen(&got[i]) == 0 {
			return fmt.Errorf("%s flow without LastSeen: %+v", what, got[i])
		}
		*lastSeen(&got[i]) = 0
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s flows\n got %+v\nwant %+v", what, got, want)
	}
	return nil
}

// flow is a NATEntry without time.
func flow(proto uint8, pod string, podPort, natPort uint16, dst string, dstPort uint16, state string) NATEntry {
	return NATEntry{Proto: proto, PodIP: mustAddr(pod), PodPort: podPort, NATPort: natPort,
		Dst: mustAddr(dst), DstPort: dstPort, State: state}
}

func TestPrivilegedBPFToNetdevMasquerade(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 0)

	tcp := ipv4(protoTCP, podA, extHost)
	udp := ipv4(protoUDP, podA, extHost)
	udpNoCsum := udp.withoutUDPChecksum()
	echo := ipv4(protoICMP, podA, extHost).withEcho(8, 7)
	fin := tcp.withTCPFlags(0x11) // FIN+ACK
	snat := func(p pkt, port uint16) []byte { return p.withSrc(nodeIP, port).build() }
	snatEcho := func(p pkt, id uint16) []byte { return p.withSrc(nodeIP, 0).withEcho(8, id).build() }
	pass := func(name string, in []byte) natCase {
		return natCase{progCase: progCase{name: name, in: in, verdict: tcActOK, reason: "PASS_STACK"}, want: []NATEntry{}}
	}
	cases := []natCase{
		{progCase: progCase{name: "TCP SYN takes a NAT port", in: tcp.build(), verdict: tcActOK, out: snat(tcp, testNATPort), reason: "PASS_STACK"},
			want: []NATEntry{flow(protoTCP, podA, 40000, testNATPort, extHost, 8080, "tcp-syn")}},
		{progCase: progCase{name: "UDP takes a NAT port", in: udp.build(), verdict: tcActOK, out: snat(udp, testNATPort), reason: "PASS_STACK"},
			want: []NATEntry{flow(protoUDP, podA, 40000, testNATPort, extHost, 8080, "udp")}},
		{progCase: progCase{name: "UDP without checksum stays without", in: udpNoCsum.build(), verdict: tcActOK, out: snat(udpNoCsum, testNATPort), reason: "PASS_STACK"},
			want: []NATEntry{flow(protoUDP, podA, 40000, testNATPort, extHost, 8080, "udp")}},
		{progCase: progCase{name: "ICMP echo request takes a NAT id", in: echo.build(), verdict: tcActOK, out: snatEcho(echo, testNATPort), reason: "PASS_STACK"},
			want: []NATEntry{flow(protoICMP, podA, 7, testNATPort, extHost, 0, "icmp")}},
		{progCase: progCase{name: "existing flow uses its NAT port", in: tcp.build(), verdict: tcActOK, out: snat(tcp, 50000), reason: "PASS_STACK"},
			seed: []NATEntry{flow(protoTCP, podA, 40000, 50000, extHost, 8080, "tcp-established")},
			want: []NATEntry{flow(protoTCP, podA, 40000, 50000, extHost, 8080, "tcp-established")}},
		{progCase: progCase{name: "FIN marks the flow closing", in: fin.build(), verdict: tcActOK, out: snat(fin, 50000), reason: "PASS_STACK"},
			seed: []NATEntry{flow(protoTCP, podA, 40000, 50000, extHost, 8080, "tcp-established")},
			want: []NATEntry{flow(protoTCP, podA, 40000, 50000, extHost, 8080, "tcp-closing")}},
		// A client outside the no-masquerade set (an apiserver that is no Node) opened
		// the connection to the pod: its replies keep the pod's address.
		pass("SYN-ACK of a connection from outside", tcp.withTCPFlags(0x12).build()),
		pass("ACK of no flow this node opened", tcp.withTCPFlags(0x10).build()),
		pass("to a pod of the cluster CIDR", ipv4(protoTCP, podA, "10.2.0.33").build()),
		pass("to a non-masquerade CIDR", ipv4(protoUDP, podA, "198.51.100.7").build()),
		pass("to the node IP", ipv4(protoTCP, podA, nodeIP).build()),
		pass("from the node itself", ipv4(protoTCP, nodeIP, extHost).build()),
		pass("from outside the cluster CIDR", ipv4(protoTCP, "172.16.0.5", extHost).build()),
		pass("ICMP error from a pod", ipv4(protoICMP, podA, extHost).withICMPError(3, 3, 0, tcp.build()[14:42]).build()),
		pass("ICMP echo reply from a pod", ipv4(protoICMP, podA, extHost).withEcho(0, 7).build()),
		// Its first fragment, translated, was not seen: it can't be reassembled with it.
		{progCase: progCase{name: "later fragment without its first", in: udp.withFragOffset(185).build(), verdict: tcActShot, reason: "DROP_FRAG_NO_FLOW"}, want: []NATEntry{}},
		pass("later fragment of another protocol", ipv4(47, podA, extHost).withFragOffset(185).build()),
		pass("other protocol", ipv4(47, podA, extHost).build()),
		pass("ARP", arpRequest()),
		pass("IPv6", ipv6Frame()),
	}
	runNATCases(t, d, d.objs.MyelinToNetdev, "to-netdev", cases)
}

// A port (or echo id) another flow to the same destination owns is not
// reused: the new flow gets another one of the NAT range (the default
// 61000-65535, above Linux's default ephemeral ports) and valid checksums.
// The pod's original port is never taken as such, even when free: a node
// socket may own it towards the same destination.
func TestPrivilegedBPFToNetdevPortCollision(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, Masquerade: true, NodeIP: testNodeIP, ClusterCIDR: testClusterCIDR})
	if err := d.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	natMin, natMax := testObjectNATPorts(t)
	for _, c := range []struct {
		name  string
		in    pkt
		other NATEntry // owns the original port towards the same destination
	}{
		{"TCP", ipv4(protoTCP, podA, extHost), flow(protoTCP, "10.1.0.99", 40000, 61000, extHost, 8080, "tcp-established")},
		{"UDP", ipv4(protoUDP, podA, extHost), flow(protoUDP, "10.1.0.99", 12345, 61001, extHost, 8080, "udp")},
		{"ICMP echo", ipv4(protoICMP, podA, extHost).withEcho(8, 7), flow(protoICMP, "10.1.0.99", 7, 65535, extHost, 0, "icmp")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := seedNAT(d, []NATEntry{c.other}, 0); err != nil {
				t.Fatal(err)
			}
			in := c.in.build()
			opts := forwardedRun(d, d.objs.MyelinToNetdev, in)
			ret, err := d.objs.MyelinToNetdev.Run(opts)
			out := opts.DataOut
			if err != nil {
				t.Fatal(err)
			}
			if ret != tcActOK {
				t.Fatalf("verdict = %d, want %d", ret, tcActOK)
			}
			port := binary.BigEndian.Uint16(out[34:]) // TCP/UDP source port
			want := c.in.withSrc(nodeIP, port)
			if c.in.proto == protoICMP {
				port = binary.BigEndian.Uint16(out[38:]) // echo id
				want = c.in.withSrc(nodeIP, 0).withEcho(8, port)
			}
			if port < natMin || port == c.other.NATPort {
				t.Errorf("NAT port %d: want one of %d-%d other than %d", port, natMin, natMax, c.other.NATPort)
			}
			if got := out[:len(in)]; !slices.Equal(got, want.build()) || !ipv4HeaderValid(got) || !l4ChecksumValid(got) {
				t.Errorf("output\n got %x\nwant %x (valid IPv4 checksum %v, L4 %v)", got, want.build(), ipv4HeaderValid(got), l4ChecksumValid(got))
			}
			mine := NATEntry{Proto: c.in.proto, PodIP: mustAddr(podA), PodPort: c.in.sport, NATPort: port,
				Dst: mustAddr(extHost), DstPort: c.in.dport, State: c.other.State}
			if c.in.proto == protoICMP {
				mine.PodPort, mine.DstPort = 7, 0
			}
			if mine.State == "tcp-established" {
				mine.State = "tcp-syn"
			}
			want2 := []NATEntry{mine, c.other}
			if err := checkNAT(d, want2); err != nil {
				t.Error(err)
			}
		})
	}
}

// With every port of the NAT range taken towards the destination, the
// packet is dropped as DROP_NAT_NO_PORT with a drop event.
func TestPrivilegedBPFToNetdevNoPort(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 0)
	f := flow(protoTCP, "10.1.0.99", 40000, testNATPort, extHost, 8080, "tcp-established")
	if _, _, rk, rv := natEntriesOf(f, testNodeIP, MonotonicNow()); d.objs.MyelinSnat.Update(rk, rv, ebpf.UpdateAny) != nil {
		t.Fatal("seed the reverse entry of the NAT port")
	}
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := ipv4(protoTCP, podA, extHost).build()
	c := progCase{name: "all ports taken", in: in, verdict: tcActShot, reason: "DROP_NAT_NO_PORT"}
	if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", c); err != nil {
		t.Error(err)
	}
	checkDropEvent(t, r, "DROP_NAT_NO_PORT", len(in))
	fill, err := d.MapFill()
	if err != nil {
		t.Fatal(err)
	}
	if got := fill[2]; got.Entries != 1 {
		t.Errorf("myelin_snat fill after the drop = %+v, want the one seeded entry only", got)
	}
}

// A full NAT map drops new flows as DROP_NAT_FULL (with a drop event),
// whichever of the flow's two inserts fails, leaves no half flow behind, and
// recovers once GCNAT has removed idle flows.
func TestPrivilegedBPFToNetdevNATFull(t *testing.T) {
	requirePrivileged(t)
	d := loadMasq(t, HostRoutingBPF, 4)
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tcp := ipv4(protoTCP, podA, extHost)
	in := tcp.build()
	idle := []NATEntry{
		flow(protoUDP, "10.1.0.98", 53, 53, "203.0.113.53", 53, "udp"),
		flow(protoUDP, "10.1.0.99", 53, 54, "203.0.113.53", 53, "udp"),
	}
	long := MonotonicNow() - 2*NATTimeoutUDP
	for _, seeded := range [][]NATEntry{idle, idle[:1]} {
		if err := seedNAT(d, seeded, long); err != nil {
			t.Fatal(err)
		}
		if len(seeded) == 1 { // one free entry: the reverse insert works, the forward one fails
			var k myelinNatKey
			k, _, _, _ = natEntriesOf(flow(protoICMP, "10.1.0.97", 1, 1, extHost, 0, "icmp"), testNodeIP, long)
			if err := d.objs.MyelinSnat.Update(k, myelinNatEntry{LastSeen: uint64(long), Addr: networkUint32(testNodeIP), Port: htons(1)}, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
		}
		c := progCase{name: fmt.Sprintf("%d flows seeded", len(seeded)), in: in, verdict: tcActShot, reason: "DROP_NAT_FULL"}
		if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", c); err != nil {
			t.Error(err)
		}
		checkDropEvent(t, r, "DROP_NAT_FULL", len(in))
		if fill, _ := d.MapFill(); fill[2].Entries != 2*len(seeded)+(2-len(seeded)) {
			t.Errorf("myelin_snat after the drop: %+v, want only the seeded entries", fill[2])
		}
	}

	removed, err := d.GCNAT(MonotonicNow())
	if err != nil {
		t.Fatal(err)
	}
	if removed != 3 {
		t.Errorf("GCNAT removed %d entries, want 3 (one idle flow and an orphan)", removed)
	}
	c := progCase{name: "after GC", in: in, verdict: tcActOK, out: tcp.withSrc(nodeIP, testNATPort).build(), reason: "PASS_STACK"}
	if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", c); err != nil {
		t.Error(err)
	}
	if err := checkNAT(d, []NATEntry{flow(protoTCP, podA, 40000, testNATPort, extHost, 8080, "tcp-syn")}); err != nil {
		t.Error(err)
	}
}

// checkDropEvent reads one event and requires a to-netdev drop of reason.
func checkDropEvent(t *testing.T, r *EventReader, reason string, length int) {
	t.Helper()
	ev, ok := readEvent(t, r, time.Second)
	if !ok {
		t.Errorf("no drop event for %s", reason)
		return
	}
	want := Event{Type: "drop", Reason: reason, Direction: "to-netdev", IfIndex: 1, Src: mustAddr(podA),
		Dst: mustAddr(extHost), Proto: protoTCP, SrcPort: 40000, DstPort: 8080, Len: uint32(length)}
	if ev != want {
		t.Errorf("event = %+v, want %+v", ev, want)
	}
}

// With Masquerade off, to_netdev passes everything and from_netdev
// translates nothing, whatever the maps hold.
func TestPrivilegedBPFMasqueradeOff(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingLegacy, HostRoutingBPF} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing})
			seeded := []NATEntry{flow(protoTCP, podA, 40000, 61040, extHost, 8080, "tcp-established")}
			out := []natCase{
				{progCase: progCase{name: "TCP to the world", in: ipv4(protoTCP, podA, extHost).build(), verdict: tcActOK, reason: "PASS_STACK"}, want: []NATEntry{}},
				{progCase: progCase{name: "UDP to the world", in: ipv4(protoUDP, podA, extHost).build(), verdict: tcActOK, reason: "PASS_STACK"}, want: []NATEntry{}},
				{progCase: progCase{name: "malformed", in: invalidCases()[0].in, verdict: tcActOK, reason: "PASS_STACK"}},
			}
			runNATCases(t, d, d.objs.MyelinToNetdev, "to-netdev", out)
			reply := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, 8080).withDst(nodeIP, 61040).withTCPFlags(0x12)
			in := []natCase{
				{progCase: progCase{name: "reply-like packet to the node", in: reply.build(), verdict: tcActOK, reason: "PASS_STACK"}, seed: seeded, want: seeded},
			}
			runNATCases(t, d, d.objs.MyelinFromNetdev, "from-netdev", in)
		})
	}
}

// Config validation of the masquerade fields.
func TestPrivilegedLoadMasqueradeConfig(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	for name, cfg := range map[string]Config{
		"no node IP":      {ClusterCIDR: testClusterCIDR},
		"IPv6 node IP":    {NodeIP: mustAddr("fd00::1"), ClusterCIDR: testClusterCIDR},
		"no cluster CIDR": {NodeIP: testNodeIP},
	} {
		cfg.PinDir, cfg.Masquerade = dir, true
		if d, err := Load(cfg); err == nil {
			d.Close()
			t.Errorf("%s: Load accepted %+v", name, cfg)
		}
	}
	d := loadMasq(t, HostRoutingBPF, 0)
	got, err := d.NoMasquerade()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Prefix.Compare)
	want := slices.Clone(testNoMasq)
	slices.SortFunc(want, netip.Prefix.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("NoMasquerade = %v, want %v", got, want)
	}
	if err := d.SetNoMasquerade([]netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.NoMasquerade(); len(got) != 1 || got[0] != testClusterCIDR {
		t.Errorf("NoMasquerade after replacing = %v, want only %v", got, testClusterCIDR)
	}
	if err := d.SetNoMasquerade([]netip.Prefix{netip.MustParsePrefix("fd00::/64")}); err == nil {
		t.Error("SetNoMasquerade accepted an IPv6 prefix")
	}
}

// testObjectNATPorts are the object's default NAT ports (bpf/lib/config.h).
func testObjectNATPorts(t *testing.T) (lo, hi uint16) {
	t.Helper()
	lo, hi, err := objectNATPorts()
	if err != nil {
		t.Fatal(err)
	}
	return lo, hi
}

// The object's default NAT ports, which a zero Config keeps, lie above Linux's
// default ephemeral ports (net.ipv4.ip_local_port_range 32768-60999).
func TestObjectNATPorts(t *testing.T) {
	lo, hi := testObjectNATPorts(t)
	if lo <= 60999 || lo > hi {
		t.Errorf("nat_port_min-max = %d-%d, want a range above 60999", lo, hi)
	}
}
