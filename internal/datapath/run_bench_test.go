package datapath

import (
	"net/netip"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/testenv"
)

// BenchmarkProgramRun is the kernel's run time of a program for one TCP segment
// of an established connection to pod B of the node, delivered with
// bpf_redirect_peer: from pod A (myelin_from_pod) and from a pod of another node
// arriving on the uplink (myelin_from_netdev); from-netdev-host is a segment to the
// node's own address (a port without a NodePort) that goes to its stack. It is the
// programs' own cost per packet, without a lab and the machine's noise in the
// netperf cases, with what an agent loads by default (load balancing, masquerade,
// BPF host routing) and flows off. from-pod-fib is pod A's segment to an address
// beyond the node in native routing: bpf_fib_lookup against a real FIB (fibLab, in
// a netns of its own) and bpf_redirect_neigh. to-netdev and to-netdev-host are
// what myelin_to_netdev costs a forwarded packet and one the node sent.
// from-pod-service is pod A's segment of an established connection to a
// ClusterIP whose backend is pod B (the tc path's translation: a conntrack
// lookup and the clock read that decides its refresh, at most once a second),
// to-netdev-masq one to an address outside the cluster leaving the uplink,
// masqueraded to the node's (a NAT lookup and the same clock read); a SYN
// opens each connection first. from-netdev-masq-reply is that connection's
// reply arriving on the uplink, translated back and delivered to pod A.
// from-netdev-vxlan is a segment from a pod of another node in tunnel mode,
// VXLAN on the uplink, which myelin_from_netdev decapsulates and delivers
// itself (tunnel_decap_deliver). from-netdev-no-pod-check is from-netdev
// without this node's PodCIDR checked on the uplink (Config.LocalPodCIDR, which
// an agent sets by default, as the others here do). from-pod-outside-tunnel-plain
// and -encapsulate are pod A's segment to an address outside the cluster in
// tunnel mode with tunnel-pod-to-node plain (the node map's lookup pruned) and
// encapsulate (a miss in it): the key's cost. from-netdev-nodeport-udp is a
// datagram of an answered UDP flow from a client outside the cluster to a
// NodePort whose backend is on another node (translated to the node's IP and
// the flow's NAT port, to the FIB), -reply the backend's reply to it
// (translated back to the client). ns/packet
// is the kernel's measure of each test run (one run per call: the program
// rewrites the packet, so a repeated run would see its own output). Run as root:
// go test -run '^$' -bench ProgramRun -count 5 ./internal/datapath/
func BenchmarkProgramRun(b *testing.B) {
	testenv.RequireRoot(b, "load BPF")
	d := programRunDatapath(b, agentDefaultConfig())
	unchecked := agentDefaultConfig()
	unchecked.LocalPodCIDR = netip.Prefix{}
	dUnchecked := programRunDatapath(b, unchecked)
	for _, c := range []struct {
		name    string
		prog    *ebpf.Program
		in      pkt
		ctx     skbCtx
		toStack bool
		open    bool // a SYN opens the connection first
	}{
		{"from-pod", d.objs.MyelinFromPod, ipv4(protoTCP, podA, podBIP), *ctxPodA, false, false},
		{"from-netdev", d.objs.MyelinFromNetdev, ipv4(protoTCP, remoteIP, podBIP), skbCtx{}, false, false},
		{"from-netdev-no-pod-check", dUnchecked.objs.MyelinFromNetdev, ipv4(protoTCP, remoteIP, podBIP), skbCtx{}, false, false},
		// The node's own traffic (kubelet's port): to the stack.
		{"from-netdev-host", d.objs.MyelinFromNetdev, ipv4(protoTCP, remoteIP, nodeIP).withDst(nodeIP, 10250), skbCtx{}, true, false},
		// Leaving the uplink: pod A's segment to a pod of another node, as the
		// stack forwards it, and one the node's own stack built (kubelet to
		// the apiserver), which the host source check parses.
		{"to-netdev", d.objs.MyelinToNetdev, ipv4(protoTCP, podA, remoteIP), *ctxForwarded, true, false},
		{"to-netdev-host", d.objs.MyelinToNetdev, ipv4(protoTCP, nodeIP, "192.168.0.1").withDst("192.168.0.1", 6443), skbCtx{}, true, false},
		{"from-pod-service", d.objs.MyelinFromPod, ipv4(protoTCP, podA, vip).withDst(vip, 80), *ctxPodA, false, true},
		{"to-netdev-masq", d.objs.MyelinToNetdev, ipv4(protoTCP, podA, "203.0.113.10").withDst("203.0.113.10", 443), *ctxForwarded, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := segment{in: c.in.withTCPFlags(tcpACK).build(), prog: c.prog, ctx: c.ctx, toStack: c.toStack}
			if c.open {
				syn := s
				syn.in = c.in.withTCPFlags(tcpSYN).build()
				runSegment(b, syn)
			}
			var ns uint64
			for b.Loop() {
				ns += uint64(runSegment(b, s))
			}
			b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
		})
	}
	b.Run("from-netdev-masq-reply", func(b *testing.B) { benchMasqReply(b, d) })
	b.Run("from-netdev-nodeport-udp", func(b *testing.B) { benchNodePortUDP(b, false) })
	b.Run("from-netdev-nodeport-udp-reply", func(b *testing.B) { benchNodePortUDP(b, true) })
	b.Run("from-pod-fib", func(b *testing.B) {
		inNetns(b, func(string) { benchFIBForward(b, d) })
	})
	b.Run("from-netdev-vxlan", benchDecapDeliver)
	// tunnel-pod-to-node's cost where it costs: every packet from a pod to an
	// address outside every PodCIDR looks the node map up (a miss here) unless
	// the key is plain, which prunes the lookup.
	for _, mode := range []TunnelPodToNode{TunnelPodToNodePlain, TunnelPodToNodeEncapsulate} {
		b.Run("from-pod-outside-tunnel-"+mode.String(), func(b *testing.B) { benchTunnelOutside(b, mode) })
	}
}

// benchMasqReply times myelin_from_netdev for the reply of pod A's masqueraded
// connection (to-netdev-masq's): to the node's IP and the flow's NAT port,
// translated back and delivered to pod A.
func benchMasqReply(b *testing.B, d *Datapath) {
	out := ipv4(protoTCP, podA, "203.0.113.10").withDst("203.0.113.10", 443)
	runSegment(b, segment{in: out.withTCPFlags(tcpSYN).build(), prog: d.objs.MyelinToNetdev, ctx: *ctxForwarded, toStack: true})
	var port uint16
	err := dumpEntries(d.objs.MyelinSnat, func(k myelinNatKey, _ myelinNatEntry) {
		if k.Dir == uint8(myelinNatDirNAT_DIR_INGRESS) && k.Saddr == networkUint32(mustAddr("203.0.113.10")) && k.Sport == htons(443) {
			port = ntohs(k.Dport)
		}
	})
	if err != nil || port == 0 {
		b.Fatalf("the masqueraded flow's NAT port: %d, %v", port, err)
	}
	reply := ipv4(protoTCP, "203.0.113.10", nodeIP).withSrc("203.0.113.10", 443).withDst(nodeIP, port).withTCPFlags(tcpACK)
	s := segment{in: reply.build(), prog: d.objs.MyelinFromNetdev}
	var ns uint64
	for b.Loop() {
		ns += uint64(runSegment(b, s))
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
}

// benchNodePortUDP times myelin_from_netdev for a datagram of an answered UDP
// flow from a client outside the cluster to a NodePort whose backend is on
// another node, or with reply for the backend's reply to it, on a datapath of
// its own; both go to the FIB, which test-run leaves to the stack.
func benchNodePortUDP(b *testing.B, reply bool) {
	d := loadTestConfig(b, agentDefaultConfig())
	if err := d.SetNoMasquerade([]netip.Prefix{lbClusterCIDR, netip.PrefixFrom(testNodeIP, 32)}); err != nil {
		b.Fatal(err)
	}
	fe := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	if err := seedLB(d, *oneService(fe, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}})); err != nil {
		b.Fatal(err)
	}
	req := segment{in: ipv4(protoUDP, extHost, nodeIP).withDst(nodeIP, nodePort).build(), prog: d.objs.MyelinFromNetdev, toStack: true}
	runSegment(b, req)
	var port uint16
	err := dumpEntries(d.objs.MyelinNodeportSyn, func(k myelinNatKey, v myelinNpEntry) {
		if k.Dir == uint8(myelinNatDirNAT_DIR_EGRESS) {
			port = ntohs(v.Xport)
		}
	})
	if err != nil || port == 0 {
		b.Fatalf("the NodePort flow's NAT port: %d, %v", port, err)
	}
	back := segment{in: ipv4(protoUDP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, port).build(),
		prog: d.objs.MyelinFromNetdev, toStack: true}
	runSegment(b, back)
	runSegment(b, req)
	if n, err := countEntries(d.objs.MyelinNodeportSyn); err != nil || n != 0 {
		b.Fatalf("the flow is still embryonic (%d entries, %v)", n, err)
	}
	s := req
	if reply {
		s = back
	}
	var ns uint64
	for b.Loop() {
		ns += uint64(runSegment(b, s))
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
}

// benchTunnelOutside times myelin_from_pod for pod A's segment to an address
// outside the cluster in tunnel mode with tunnel-pod-to-node mode (node B in the
// node map), to the FIB, which test-run leaves to the stack.
func benchTunnelOutside(b *testing.B, mode TunnelPodToNode) {
	cfg := agentDefaultConfig()
	cfg.Tunnel, cfg.OverlayIfIndex, cfg.OverlayMAC, cfg.TunnelPodToNode = true, testOverlayIfIndex, testOverlayMAC, mode
	d := programRunDatapath(b, cfg)
	if err := seedTunnels(d, seedTunnelB); err != nil {
		b.Fatal(err)
	}
	if err := d.UpsertTunnelNode(mustAddr(tunnelNodeB)); err != nil {
		b.Fatal(err)
	}
	out := ipv4(protoTCP, podA, "203.0.113.10").withDst("203.0.113.10", 443)
	runSegment(b, segment{in: out.withTCPFlags(tcpSYN).build(), prog: d.objs.MyelinFromPod, ctx: *ctxPodA, toStack: true})
	s := segment{in: out.withTCPFlags(tcpACK).build(), prog: d.objs.MyelinFromPod, ctx: *ctxPodA, toStack: true}
	var ns uint64
	for b.Loop() {
		ns += uint64(runSegment(b, s))
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
}

// programRunDatapath is a datapath loaded with cfg, pods A and B its endpoints and
// feTCP a Service of B.
func programRunDatapath(b *testing.B, cfg Config) *Datapath {
	d := loadTestConfig(b, cfg)
	if err := seedEndpoints(d, seedAB); err != nil {
		b.Fatal(err)
	}
	if err := seedLB(d, lbState{backends: map[uint32]Backend{1: backendB},
		services: map[Frontend]Service{feTCP: {ID: 1, Backends: []uint32{1}}}}); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchDecapDeliver times myelin_from_netdev decapsulating a VXLAN packet from
// node B (a TCP segment of its pod to pod B of this node, node A) and
// delivering it, on a tunnel-mode datapath of its own.
func benchDecapDeliver(b *testing.B) {
	d := loadTestConfig(b, Config{HostRouting: HostRoutingBPF, Tunnel: true, OverlayIfIndex: testOverlayIfIndex,
		OverlayMAC: testOverlayMAC, NodeIP: mustAddr("198.51.100.1"), TunnelPort: tunnelPort})
	if err := seedEndpoints(d, seedB); err != nil {
		b.Fatal(err)
	}
	if err := seedTunnels(d, seedTunnelB); err != nil {
		b.Fatal(err)
	}
	inner := ipv4(protoTCP, "10.2.0.5", "10.1.0.20").withTCPFlags(tcpACK).
		withMACs(OverlayMAC(mustAddr("198.51.100.2")), testOverlayMAC)
	s := segment{in: vxlanToA("198.51.100.2", 0, inner.build()).build(), prog: d.objs.MyelinFromNetdev}
	var ns uint64
	for b.Loop() {
		ns += uint64(runSegment(b, s))
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
}

// benchFIBForward times from_pod forwarding pod A's segments by the FIB of the
// calling thread's netns (a throwaway one: it adds fibLab and turns forwarding on).
func benchFIBForward(b *testing.B, d *Datapath) {
	lab, err := setupFIBLab()
	if err == nil {
		err = setForwarding(true)
	}
	sender := podASender
	sender.IfIndex = lab.in
	if err == nil {
		err = seedEndpoints(d, map[string]EndpointInfo{podA: sender, podBIP: podB})
	}
	if err != nil {
		b.Error(err)
		return
	}
	s := segment{in: ipv4(protoTCP, podA, "10.200.0.5").withTCPFlags(tcpACK).build(), prog: d.objs.MyelinFromPod,
		ctx: skbCtx{IngressIfindex: uint32(lab.in), Ifindex: uint32(lab.in)}}
	var ns uint64
	for b.Loop() {
		// Not runSegment: this is inNetns's goroutine, where b.Fatal may not be called.
		took, err := testRunSegment(s)
		if err != nil {
			b.Error(err)
			return
		}
		ns += uint64(took)
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/packet")
}

// testRun is one BPF_PROG_TEST_RUN of the program fd: its verdict and the
// kernel's measure of its run time in ns. cilium/ebpf's Program.Run does not
// return the duration, and its Benchmark takes no context.
func testRun(fd int, in, out, ctx []byte) (ret, ns uint32, err error) {
	attr := struct {
		progFD, retval, dataSizeIn, dataSizeOut uint32
		dataIn, dataOut                         uint64
		repeat, duration                        uint32
		ctxSizeIn, ctxSizeOut                   uint32
		ctxIn, ctxOut                           uint64
		flags, cpu, batchSize                   uint32
		_                                       uint32
	}{progFD: uint32(fd), dataSizeIn: uint32(len(in)), dataSizeOut: uint32(len(out)),
		dataIn: uint64(uintptr(unsafe.Pointer(&in[0]))), dataOut: uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat: 1, ctxSizeIn: uint32(len(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx[0])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(in)
	runtime.KeepAlive(out)
	runtime.KeepAlive(ctx)
	if errno != 0 {
		return 0, 0, errno
	}
	return attr.retval, attr.duration, nil
}
