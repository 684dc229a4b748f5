package datapath

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
)

// portMarked reports whether myelin_lb_ports has port's bit (port in host order).
func portMarked(t *testing.T, d *Datapath, port uint16) bool {
	return bitMarked(t, d.objs.MyelinLbPorts, port)
}

// nodePortMarked reports whether myelin_lb_nodeports has port's bit (host order).
func nodePortMarked(t *testing.T, d *Datapath, port uint16) bool {
	return bitMarked(t, d.objs.MyelinLbNodeports, port)
}

// bitMarked reports whether the port bitmap m has port's bit (port in host order).
func bitMarked(t *testing.T, m *ebpf.Map, port uint16) bool {
	t.Helper()
	p := uint32(htons(port))
	var w uint32
	if err := m.Lookup(p/32, &w); err != nil {
		t.Fatal(err)
	}
	return w>>(p%32)&1 == 1
}

// wantRun runs in through prog (ctx may be nil) and checks the verdict and that
// the output starts with want.
func wantRun(t *testing.T, prog *ebpf.Program, in pkt, ctx *skbCtx, verdict uint32, want []byte, what string) {
	t.Helper()
	ret, out, err := runPacket(prog, in.build(), ctx)
	if err != nil || ret != verdict || len(out) < len(want) || !bytes.Equal(out[:len(want)], want) {
		t.Errorf("%s: verdict %d, err %v, out\n%x\nwant verdict %d,\n%x", what, ret, err, out, verdict, want)
	}
}

// loadPinnedLB loads a datapath with load balancing from a pin dir that outlives
// its Close (unpinned when the test ends), so a test can load it again as an
// agent restart would: its config and the datapath, whose port bitmaps must
// have the agent's size.
func loadPinnedLB(t *testing.T) (Config, *Datapath) {
	t.Helper()
	dir := testPinDirReady(t)
	t.Cleanup(func() { Unpin(dir) })
	cfg := Config{PinDir: dir, HostRouting: HostRoutingBPF, LoadBalancing: true, NodeIP: testNodeIP,
		ClusterCIDR: lbClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort}
	d, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*ebpf.Map{"myelin_lb_ports": d.objs.MyelinLbPorts, "myelin_lb_nodeports": d.objs.MyelinLbNodeports} {
		if n := m.MaxEntries(); n != lbPortWords {
			d.Close()
			t.Fatalf("%s has %d words, the agent's copy %d (bpf/lib/maps.h LB_PORT_WORDS)", name, n, lbPortWords)
		}
	}
	return cfg, d
}

// A reply entering a pod is looked up in the Service conntrack only when its
// source port may be a backend's (myelin_lb_ports): a backend's port is marked
// before the backend is written; every load marks the ports of the backends
// (an older agent may have written some), and a bitmap a load creates (an
// upgrade from a datapath without it) is seeded from the flows left in
// conntrack too, so those flows' replies are still translated.
func TestPrivilegedLBReplyPorts(t *testing.T) {
	requirePrivileged(t)
	cfg, d := loadPinnedLB(t)
	defer func() { d.Close() }()
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	remote := Backend{Addr: mustAddr(remoteIP), Port: 9090}
	st := lbState{backends: map[uint32]Backend{2: remote}, services: map[Frontend]Service{feTCP: {ID: 1, Backends: []uint32{2}}}}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
	if !portMarked(t, d, 9090) || portMarked(t, d, 9999) {
		t.Fatalf("after UpsertBackend of port 9090: 9090 marked %v, 9999 marked %v; want only 9090",
			portMarked(t, d, 9090), portMarked(t, d, 9999))
	}
	// A flow of pod A to the ClusterIP, DNATed to remote:9090 (no FIB in a test run: the stack gets it).
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	if ret, _, err := runPacket(d.objs.MyelinFromPod, syn.build(), ctxPodA); err != nil || ret != tcActOK {
		t.Fatalf("SYN to the ClusterIP: verdict %d, err %v; want %d", ret, err, tcActOK)
	}
	reply := ipv4(protoTCP, remoteIP, podA).withSrc(remoteIP, 9090).withDst(podA, 40000).withTCPFlags(0x12)
	restored := reply.withSrc(vip, 80).build()
	wantRun(t, d.objs.MyelinToPod, reply, ctxForwarded, tcActOK, restored, "reply from the backend's port")

	// The same flow's reverse entry under a port no backend has: not looked up.
	k := myelinCtKey{Saddr: networkUint32(reply.src), Daddr: networkUint32(reply.dst), Sport: htons(9090),
		Dport: htons(40000), Proto: protoTCP, Dir: uint8(myelinCtDirCT_DIR_REVERSE)}
	var v myelinCtEntry
	if err := d.objs.MyelinLbCt.Lookup(k, &v); err != nil {
		t.Fatal(err)
	}
	k.Sport = htons(9999)
	if err := d.objs.MyelinLbCt.Update(k, v, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	other := reply.withSrc(remoteIP, 9999)
	wantRun(t, d.objs.MyelinToPod, other, ctxForwarded, tcActOK, other.build(), "reply from an unmarked port")

	// An upgrade: the service and its backend are gone, the flow is not, and the
	// datapath that left it had no bitmap.
	if err := d.DeleteService(feTCP); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteBackend(2); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := os.Remove(filepath.Join(cfg.PinDir, "myelin_lb_ports")); err != nil {
		t.Fatal(err)
	}
	var err error
	d, err = Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !portMarked(t, d, 9090) || !portMarked(t, d, 9999) || portMarked(t, d, 8080) {
		t.Errorf("seeded from conntrack: 9090 %v, 9999 %v, 8080 %v; want 9090 and 9999 only",
			portMarked(t, d, 9090), portMarked(t, d, 9999), portMarked(t, d, 8080))
	}
	wantRun(t, d.objs.MyelinToPod, reply, ctxForwarded, tcActOK, restored, "after the upgrade, reply from the gone backend's port")

	// A rollback rolled forward: an older agent wrote a backend without marking
	// its port; the next load marks it (the bitmap stays pinned meanwhile).
	older := myelinLbBackend{Addr: networkUint32(mustAddr(remoteIP)), Port: htons(7070)}
	if err := d.objs.MyelinLbBackends.Update(uint32(3), older, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !portMarked(t, d, 7070) {
		t.Error("a backend an older agent wrote: its port 7070 is not marked after the next load")
	}
}

// A packet to the node's IP is looked up among the services only when its port
// has a NodePort frontend (myelin_lb_nodeports): UpsertService marks the port
// before it writes the frontend, every load marks the NodePort frontends the
// maps hold (an older agent may have written some without), and the node's
// other traffic passes to the stack untouched, without a lookup.
func TestPrivilegedLBNodePortBits(t *testing.T) {
	requirePrivileged(t)
	cfg, d := loadPinnedLB(t)
	defer func() { d.Close() }()
	if err := seedEndpoints(d, seedB); err != nil {
		t.Fatal(err)
	}
	// A ClusterIP on port 80 and a NodePort: only the NodePort's port is marked.
	st := oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})
	st.services[feTCP] = Service{ID: 2, Backends: []uint32{1}}
	if err := seedLB(d, *st); err != nil {
		t.Fatal(err)
	}
	if !nodePortMarked(t, d, nodePort) || nodePortMarked(t, d, 80) {
		t.Fatalf("after UpsertService: NodePort %d marked %v, ClusterIP port 80 marked %v; want only the NodePort",
			nodePort, nodePortMarked(t, d, nodePort), nodePortMarked(t, d, 80))
	}
	req := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, 40000).withDst(nodeIP, nodePort)
	wantRun(t, d.objs.MyelinFromNetdev, req, nil, tcActRedirect, delivered(req.withDst(podBIP, 8080)), "NodePort request")
	ssh := req.withDst(nodeIP, 22)
	wantRun(t, d.objs.MyelinFromNetdev, ssh, nil, tcActOK, ssh.build(), "the node's own port 22: to the stack untouched")

	// An older agent wrote a NodePort frontend without marking its port: not
	// looked up (the node's stack gets it) until the next load marks it.
	var v myelinLbSvc
	key := myelinLbSvcKey{Addr: networkUint32(testNodeIP), Port: htons(nodePort), Proto: protoTCP}
	if err := d.objs.MyelinLbServices.Lookup(key, &v); err != nil {
		t.Fatal(err)
	}
	key.Port = htons(nodePort + 1)
	if err := d.objs.MyelinLbServices.Update(key, v, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	older := req.withSrc(extHost, 40001).withDst(nodeIP, nodePort+1)
	wantRun(t, d.objs.MyelinFromNetdev, older, nil, tcActOK, older.build(), "unmarked NodePort frontend: not looked up")
	d.Close()
	var err error
	d, err = Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !nodePortMarked(t, d, nodePort+1) || nodePortMarked(t, d, 80) {
		t.Errorf("after the next load: port %d marked %v, 80 marked %v; want the NodePort frontends' only",
			nodePort+1, nodePortMarked(t, d, nodePort+1), nodePortMarked(t, d, 80))
	}
	wantRun(t, d.objs.MyelinFromNetdev, older, nil, tcActRedirect, delivered(older.withDst(podBIP, 8080)), "the older agent's NodePort after the next load")
}

// A pod's packet to outside the cluster is looked up as a local backend's reply
// to a NodePort client (nodeport_ct.h) only when it comes from a port a
// backend may use (myelin_lb_ports): the pod's own connections out pay a bit test.
func TestPrivilegedLBNodePortReplyPorts(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedEndpoints(d, seedB); err != nil {
		t.Fatal(err)
	}
	if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})); err != nil {
		t.Fatal(err)
	}
	req := ipv4(protoTCP, extHost, nodeIP).withSrc(extHost, 40000).withDst(nodeIP, nodePort)
	if ret, _, err := runPacket(d.objs.MyelinFromNetdev, req.build(), nil); err != nil || ret != tcActRedirect {
		t.Fatalf("NodePort request: verdict %d, err %v; want %d", ret, err, tcActRedirect)
	}
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	reply := fromPodB(ipv4(protoTCP, podBIP, extHost).withSrc(podBIP, 8080).withDst(extHost, 40000).withTCPFlags(0x12))
	wantRun(t, d.objs.MyelinFromPod, reply, ctxPodB, tcActOK, reply.withSrc(nodeIP, nodePort).build(), "the backend's reply from its port 8080")

	// The same flow's reverse entry under a port no backend has: not looked up.
	k := myelinCtKey{Saddr: networkUint32(mustAddr(podBIP)), Daddr: networkUint32(mustAddr(extHost)), Sport: htons(8080),
		Dport: htons(40000), Proto: protoTCP, Dir: uint8(myelinCtDirCT_DIR_REVERSE)}
	var v myelinCtEntry
	if err := d.objs.MyelinLbCtNodeportSyn.Lookup(k, &v); err != nil {
		t.Fatalf("the NodePort flow's reverse entry (awaiting its backend): %v", err)
	}
	k.Sport = htons(9999)
	if err := d.objs.MyelinLbCtNodeportSyn.Update(k, v, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	own := reply.withSrc(podBIP, 9999)
	wantRun(t, d.objs.MyelinFromPod, own, ctxPodB, tcActOK, own.build(), "the pod's own packet from an unmarked port 9999")
}
