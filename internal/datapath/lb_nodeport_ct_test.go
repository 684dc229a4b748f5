package datapath

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
)

// nodePortCTClient is a NodePort client's flow to pod B (backend 1) through
// the node: its packets as sent and as delivered, the backend's as sent and
// as the client gets them.
type nodePortCTClient struct {
	req, reply pkt
}

func newNodePortCTClient(proto uint8, src string, sport uint16) nodePortCTClient {
	req := ipv4(proto, src, nodeIP).withSrc(src, sport).withDst(nodeIP, nodePort).withSeq(1000, 0)
	reply := fromPodB(ipv4(proto, podBIP, src).withSrc(podBIP, 8080).withDst(src, sport))
	return nodePortCTClient{req: req, reply: reply}
}

// send runs the client's packet p through the uplink: it must reach pod B.
func (c nodePortCTClient) send(t *testing.T, d *Datapath, p pkt, what string) {
	t.Helper()
	wantRun(t, d.objs.MyelinFromNetdev, p, nil, tcActRedirect, delivered(p.withDst(podBIP, 8080)), what)
}

// answer runs the backend's packet p out of pod B: it must leave from the NodePort.
func (c nodePortCTClient) answer(t *testing.T, d *Datapath, p pkt, what string) {
	t.Helper()
	wantRun(t, d.objs.MyelinFromPod, p, &skbCtx{IngressIfindex: uint32(podB.IfIndex)}, tcActOK,
		p.withSrc(nodeIP, nodePort).build(), what)
}

// handshake runs a TCP connection's opening: SYN, SYN-ACK, the client's ACK
// with data, and the backend's ACK of that data (the answer).
func (c nodePortCTClient) handshake(t *testing.T, d *Datapath) {
	t.Helper()
	c.send(t, d, c.req.withTCPFlags(tcpSYN).bare(), "SYN")
	c.answer(t, d, c.reply.withTCPFlags(0x12).withSeq(5000, 1001).bare(), "SYN-ACK")
	c.send(t, d, c.req.withTCPFlags(0x18).withSeq(1001, 5001), "the client's data")
	c.answer(t, d, c.reply.withTCPFlags(tcpACK).withSeq(5001, 1020).bare(), "the backend's ACK of it")
}

// where says which NodePort conntrack tables hold the flow's two entries.
func (c nodePortCTClient) where(d *Datapath) (hash, lru int) {
	fwd, rev := ctFlowKeys(c.req, backendB)
	for _, k := range []myelinCtKey{fwd, rev} {
		if _, err := ctEntryOf(d.objs.MyelinLbCtNodeport, k); err == nil {
			hash++
		}
		if _, err := ctEntryOf(d.objs.MyelinLbCtNodeportSyn, k); err == nil {
			lru++
		}
	}
	return hash, lru
}

// wantAwaiting checks whether the flow's reverse entry in myelin_lb_ct_nodeport
// still awaits its backend's answer (CT_F_AWAITING_REPLY).
func (c nodePortCTClient) wantAwaiting(t *testing.T, d *Datapath, want bool, what string) {
	t.Helper()
	_, rev := ctFlowKeys(c.req, backendB)
	v, err := ctEntryOf(d.objs.MyelinLbCtNodeport, rev)
	if got := v.Flags&uint16(myelinCtFlagsCT_F_AWAITING_REPLY) != 0; err != nil || got != want {
		t.Errorf("%s: %+v, %v; want CT_F_AWAITING_REPLY %v", what, v, err, want)
	}
}

func wantWhere(t *testing.T, d *Datapath, c nodePortCTClient, hash, lru int, what string) {
	t.Helper()
	if h, l := c.where(d); h != hash || l != lru {
		t.Errorf("%s: entries in myelin_lb_ct_nodeport %d, in myelin_lb_ct_nodeport_syn %d; want %d, %d", what, h, l, hash, lru)
	}
}

func wantEntries(t *testing.T, m *ebpf.Map, want int, what string) {
	t.Helper()
	if n, err := countEntries(m); err != nil || n != want {
		t.Errorf("%s: %v holds %d entries (%v), want %d", what, m, n, err, want)
	}
}

func seedNodePortCT(t *testing.T, d *Datapath) {
	t.Helper()
	feUDPNodePort := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	st := lbState{backends: lbBackends, services: map[Frontend]Service{
		feTCP:         {ID: 1, Backends: []uint32{1}},
		feNodePort:    {ID: 2, Flags: ServiceNodePort, Backends: []uint32{1}},
		feUDPNodePort: {ID: 3, Flags: ServiceNodePort, Backends: []uint32{1}},
	}}
	if err := seedEndpoints(d, seedB); err != nil {
		t.Fatal(err)
	}
	if err := seedLB(d, st); err != nil {
		t.Fatal(err)
	}
}

// A flood of NodePort flows to a local backend from forged sources — SYNs,
// and UDP datagrams, which need no answer at all — churns the LRU
// myelin_lb_ct_nodeport_syn only: a TCP flow whose backend answered lives in
// myelin_lb_ct_nodeport, untouched, and a new connection completes after
// the flood. A UDP flow is never moved there (no answer proves its source).
func TestPrivilegedLBNodePortFloodChurnsLRU(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	seedNodePortCT(t, d)
	honest := newNodePortCTClient(protoTCP, extHost, 40000)
	honest.handshake(t, d)
	wantWhere(t, d, honest, 2, 0, "answered")

	// More flows than the LRU holds (two entries each).
	flood := int(d.objs.MyelinLbCtNodeportSyn.MaxEntries())/2 + 4096
	for _, proto := range []uint8{protoTCP, protoUDP} {
		for i := range flood {
			forged := newNodePortCTClient(proto, fmt.Sprintf("198.51.%d.%d", i/250, i%250+1), uint16(1024+i%60000))
			p := forged.req
			if proto == protoTCP {
				p = p.withTCPFlags(tcpSYN).bare()
			}
			ret, _, err := runPacket(d.objs.MyelinFromNetdev, p.build(), nil)
			if err != nil || ret != tcActRedirect {
				t.Fatalf("forged flow %d (proto %d): verdict %d, err %v; want it sent to the backend", i, proto, ret, err)
			}
		}
		wantEntries(t, d.objs.MyelinLbCtNodeport, 2, fmt.Sprintf("after %d forged flows of proto %d", flood, proto))
	}
	wantWhere(t, d, honest, 2, 0, "the answered flow after the floods")
	honest.send(t, d, honest.req.withTCPFlags(0x18).withSeq(1020, 5001), "the answered flow's client goes on")
	honest.answer(t, d, honest.reply.withTCPFlags(0x18).withSeq(5001, 1040), "its backend's replies are translated")

	late := newNodePortCTClient(protoTCP, extHost, 40001)
	late.handshake(t, d)
	wantWhere(t, d, late, 2, 0, "a connection opened after the flood")

	udp := newNodePortCTClient(protoUDP, extHost, 5353)
	for i := range 3 {
		udp.send(t, d, udp.req, fmt.Sprintf("UDP datagram %d", i))
		udp.answer(t, d, udp.reply, fmt.Sprintf("UDP reply %d", i))
	}
	wantWhere(t, d, udp, 0, 2, "a UDP flow with replies")
}

// Only the client's ACK of the backend's SYN-ACK moves a flow to
// myelin_lb_ct_nodeport: a blind client (a forged source) never sees that
// number. Neither a wrong ACK nor the backend's other answers do — not the
// trick that removed the first-SYN pin (make the backend RST the flow, then
// SYN lower so the half-open backend's ACK looks like an answer).
func TestPrivilegedLBNodePortPromotedByClientAck(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	seedNodePortCT(t, d)
	c := newNodePortCTClient(protoTCP, extHost, 40000)
	c.send(t, d, c.req.withTCPFlags(tcpSYN).bare(), "SYN")
	c.answer(t, d, c.reply.withTCPFlags(0x12).withSeq(5000, 1001).bare(), "SYN-ACK")
	wantWhere(t, d, c, 0, 2, "after the SYN-ACK")
	c.send(t, d, c.req.withTCPFlags(tcpACK).withSeq(1001, 5002).bare(), "an ACK of another number")
	c.send(t, d, c.req.withTCPFlags(0x18).withSeq(1001, 4000), "data acknowledging less")
	wantWhere(t, d, c, 0, 2, "after ACKs of numbers the backend never sent")
	// The half-open backend answers those with an ACK of the SYN: it records nothing.
	c.answer(t, d, c.reply.withTCPFlags(tcpACK).withSeq(5001, 1001).bare(), "the backend's ACK of the SYN")
	c.send(t, d, c.req.withTCPFlags(tcpACK).withSeq(1001, 5001).bare(), "the client's ACK of the SYN-ACK")
	wantWhere(t, d, c, 2, 0, "after the client's ACK")
	// In the hash the flow still awaits its backend's answer (the SYN timeout):
	// a client completing handshakes and sending nothing holds no entry for 6 h.
	c.wantAwaiting(t, d, true, "the promoted reverse entry")
	c.send(t, d, c.req.withTCPFlags(0x18).withSeq(1001, 5001), "the client's data")
	c.answer(t, d, c.reply.withTCPFlags(tcpACK).withSeq(5001, 1020).bare(), "the backend's ACK of it")
	c.wantAwaiting(t, d, false, "the reverse entry after the backend's answer")

	blind := newNodePortCTClient(protoTCP, "198.51.100.7", 40000)
	blind.send(t, d, blind.req.withTCPFlags(tcpSYN).withSeq(1<<30, 0).bare(), "a forged SYN")
	blind.answer(t, d, blind.reply.withTCPFlags(tcpRST).bare(), "the backend's RST")
	blind.send(t, d, blind.req.withTCPFlags(tcpACK).withSeq(1<<30+1, 77).bare(), "a forged ACK")
	blind.send(t, d, blind.req.withTCPFlags(tcpSYN).withSeq(100, 0).bare(), "a lower SYN")
	blind.answer(t, d, blind.reply.withTCPFlags(tcpACK).withSeq(9000, 1<<30+1).bare(), "the half-open backend's ACK of the first SYN")
	for _, ack := range []uint32{9001, 1<<30 + 1, 101} {
		blind.send(t, d, blind.req.withTCPFlags(tcpACK).withSeq(101, ack).bare(), fmt.Sprintf("a forged ACK of %d", ack))
	}
	wantWhere(t, d, blind, 0, 2, "the blind client's flow")
}

// A SYN on an answered, established flow's tuple is no new connection (a
// forged one must not move the flow back to the LRU): it goes to the same
// backend and the flow stays in myelin_lb_ct_nodeport. Once the flow closed
// (a FIN, or a forged RST), a new connection on the tuple takes the old
// entries' place in the hash; once its backend left the pool, a SYN
// chooses again.
func TestPrivilegedLBNodePortSynOnAnsweredFlow(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	seedNodePortCT(t, d)
	c := newNodePortCTClient(protoTCP, extHost, 40000)
	c.handshake(t, d)
	wantWhere(t, d, c, 2, 0, "answered")
	syn := c.req.withTCPFlags(tcpSYN).withSeq(90000, 0).bare()
	c.send(t, d, syn, "a SYN on the established tuple")
	wantWhere(t, d, c, 2, 0, "the established flow after the SYN")
	challenge := c.reply.withTCPFlags(tcpACK).withSeq(5001, 1020).bare()
	c.answer(t, d, challenge, "the backend's challenge ACK, translated")

	rst := c.req.withTCPFlags(tcpRST).withSeq(1<<31, 0).bare()
	c.send(t, d, rst, "a forged RST")
	c.send(t, d, syn, "a SYN on the closing tuple")
	wantWhere(t, d, c, 2, 0, "the tuple after RST and SYN: in the hash still")
	// Written over in place, the entries keep the first SYN's number: a lower
	// SYN does not make the half-open backend's ACK of the first an answer.
	lower := syn.withSeq(100, 0)
	c.send(t, d, lower, "a lower SYN")
	c.answer(t, d, c.reply.withTCPFlags(tcpACK).withSeq(7001, 90001).bare(), "the half-open backend's ACK of the first SYN")
	c.wantAwaiting(t, d, true, "the reverse entry after a lower SYN and the backend's ACK of the first")
	synack := c.reply.withTCPFlags(0x12).withSeq(7000, 90001).bare()
	c.answer(t, d, synack, "the new connection's SYN-ACK, translated")
	c.send(t, d, c.req.withTCPFlags(0x18).withSeq(90001, 7001), "the client's ACK of it")
	wantWhere(t, d, c, 2, 0, "the new connection")

	// Backend 1 leaves the pool (backend 2, on another node, stays): a SYN
	// on the established tuple chooses again, and goes to the remote one.
	if err := d.UpsertService(feNodePort, Service{ID: 2, Flags: ServiceNodePort, Backends: []uint32{2}}); err != nil {
		t.Fatal(err)
	}
	c.send(t, d, c.req.withTCPFlags(0x18).withSeq(90001, 7001), "the established flow goes on to its backend")
	ret, out, err := runPacket(d.objs.MyelinFromNetdev, syn.build(), nil)
	if err != nil || ret == tcActRedirect {
		t.Errorf("a SYN after its backend left the pool: verdict %d, err %v, out %x; want it sent to the remote backend, not delivered", ret, err, out)
	}
	wantWhere(t, d, c, 0, 0, "the local flow's entries once the tuple went to a remote backend")
}

// With myelin_lb_ct_nodeport full, new NodePort flows still open and work
// from the LRU (an answered one is not moved), while the flows already in
// the hash and pods' own Service flows (their own table) go on.
func TestPrivilegedLBNodePortConntrackFull(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	seedNodePortCT(t, d)
	old := newNodePortCTClient(protoTCP, extHost, 40000)
	old.handshake(t, d)
	hash := d.objs.MyelinLbCtNodeport
	max := int(hash.MaxEntries())
	keys := make([]myelinCtKey, 0, max)
	vals := make([]myelinCtEntry, 0, max)
	for i := 0; len(keys) < max-2; i++ {
		k, _ := ctFlowKeys(old.req.withSrc(fmt.Sprintf("198.51.100.%d", i/60000+1), uint16(i%60000+1)), backendB)
		keys = append(keys, k)
		vals = append(vals, myelinCtEntry{Flags: uint16(myelinCtFlagsCT_F_NODEPORT)})
	}
	if _, err := hash.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, hash, max, "filled")
	old.send(t, d, old.req.withTCPFlags(0x18).withSeq(1020, 5001), "the answered flow goes on in a full table")
	old.answer(t, d, old.reply.withTCPFlags(0x18).withSeq(5001, 1040), "and its replies")
	c := newNodePortCTClient(protoTCP, extHost, 40001)
	c.handshake(t, d)
	wantWhere(t, d, c, 0, 2, "a new flow answered while the table is full")
	c.answer(t, d, c.reply.withTCPFlags(0x18).withSeq(5001, 1020), "its replies are translated from the LRU")
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	err := checkCase(d, d.objs.MyelinFromPod, "from-pod", progCase{name: "a pod's new ClusterIP flow: its own table has room",
		endpoints: seedB, in: syn.build(), verdict: tcActRedirect, out: delivered(syn.withDst(podBIP, 8080)), reason: "FORWARDED"})
	if err != nil {
		t.Error(err)
	}
}

// An upgrade from a datapath without myelin_lb_ct_nodeport_syn, whose
// NodePort flows are all in myelin_lb_ct_nodeport: the load that creates the
// LRU moves the UDP flows there (UDP is looked up there only), so their
// replies are still translated, and the TCP flows still awaiting their
// backend (a SYN flood's), which would otherwise count as proven; answered
// TCP flows stay. A later restart moves no TCP flow.
func TestPrivilegedLBNodePortUnprovenMovedOnUpgrade(t *testing.T) {
	requirePrivileged(t)
	cfg, d := loadPinnedLB(t)
	defer func() { d.Close() }()
	seedNodePortCT(t, d)
	udp := newNodePortCTClient(protoUDP, extHost, 5353)
	udp.send(t, d, udp.req, "a UDP datagram")
	tcp := newNodePortCTClient(protoTCP, extHost, 40000)
	tcp.handshake(t, d)
	flooded := newNodePortCTClient(protoTCP, "198.51.100.9", 40001)
	flooded.send(t, d, flooded.req.withTCPFlags(tcpSYN).bare(), "a forged SYN")
	// As the older datapath kept them: in the hash.
	fwd, rev := ctFlowKeys(udp.req, backendB)
	ffwd, frev := ctFlowKeys(flooded.req, backendB)
	for _, k := range []myelinCtKey{fwd, rev, ffwd, frev} {
		v, err := ctEntryOf(d.objs.MyelinLbCtNodeportSyn, k)
		if err == nil {
			err = d.objs.MyelinLbCtNodeport.Update(k, v, ebpf.UpdateAny)
		}
		if err == nil {
			err = d.objs.MyelinLbCtNodeportSyn.Delete(k)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	if err := os.Remove(filepath.Join(cfg.PinDir, "myelin_lb_ct_nodeport_syn")); err != nil {
		t.Fatal(err)
	}
	var err error
	if d, err = Load(cfg); err != nil {
		t.Fatal(err)
	}
	wantWhere(t, d, udp, 0, 2, "the UDP flow after the upgrade")
	wantWhere(t, d, tcp, 2, 0, "the TCP flow its backend answered, after the upgrade")
	wantWhere(t, d, flooded, 0, 2, "the TCP flow still awaiting its backend, after the upgrade")
	udp.answer(t, d, udp.reply, "the UDP flow's reply, translated")

	// A restart (the LRU is there): a promoted flow still awaiting its backend stays.
	fresh := newNodePortCTClient(protoTCP, extHost, 40002)
	fresh.send(t, d, fresh.req.withTCPFlags(tcpSYN).bare(), "SYN")
	fresh.answer(t, d, fresh.reply.withTCPFlags(0x12).withSeq(5000, 1001).bare(), "SYN-ACK")
	fresh.send(t, d, fresh.req.withTCPFlags(tcpACK).withSeq(1001, 5001).bare(), "the client's ACK")
	wantWhere(t, d, fresh, 2, 0, "promoted, still awaiting its backend")
	d.Close()
	if d, err = Load(cfg); err != nil {
		t.Fatal(err)
	}
	wantWhere(t, d, fresh, 2, 0, "promoted, still awaiting its backend, after a restart")
}
