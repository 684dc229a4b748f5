package datapath

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// TCP flags of the rows below.
const (
	tcpSYN    = 0x02
	tcpACK    = 0x10
	tcpFINACK = 0x11
	tcpRST    = 0x04
)

// ctFlowKeys are the forward and reverse keys of the flow of request p whose
// backend is be (replies go to the client).
func ctFlowKeys(p pkt, be Backend) (fwd, rev myelinCtKey) {
	fwd = myelinCtKey{Saddr: networkUint32(p.src), Daddr: networkUint32(p.dst), Sport: htons(p.sport),
		Dport: htons(p.dport), Proto: p.proto, Dir: uint8(myelinCtDirCT_DIR_FORWARD)}
	rev = myelinCtKey{Saddr: networkUint32(be.Addr), Daddr: networkUint32(p.src), Sport: htons(be.Port),
		Dport: htons(p.sport), Proto: p.proto, Dir: uint8(myelinCtDirCT_DIR_REVERSE)}
	return fwd, rev
}

// ctEntryOf reads key from m.
func ctEntryOf(m *ebpf.Map, key myelinCtKey) (myelinCtEntry, error) {
	var v myelinCtEntry
	err := m.Lookup(key, &v)
	return v, err
}

// ctAge sets last_seen of key in m to at.
func ctAge(m *ebpf.Map, key myelinCtKey, at time.Duration) error {
	v, err := ctEntryOf(m, key)
	if err != nil {
		return fmt.Errorf("age conntrack entry: %w", err)
	}
	v.LastSeen = uint64(at)
	return m.Update(key, v, ebpf.UpdateExist)
}

// A new connection never follows a conntrack entry to a stale backend: a
// reused backend id, a frontend now owned by another Service (new service
// id), a closed connection's SYN, a terminating backend. Established flows
// keep their backend while it is the same address and port.
func TestPrivilegedLBStaleConntrack(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod := d.objs.MyelinFromPod
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	ack := syn.withTCPFlags(tcpACK)
	toB := delivered(syn.withDst(podBIP, 8080))
	// Without a test-run context the FIB lookup fails: the stack gets packets to the remote backend.
	toRemote := func(p pkt) []byte { return p.withDst(remoteIP, 8080).build() }
	other := Backend{Addr: mustAddr("10.2.0.99"), Port: 9090} // another Service's pod
	do := func(fs ...func(d *Datapath) error) func(d *Datapath) error {
		return func(d *Datapath) error {
			for _, f := range fs {
				if err := f(d); err != nil {
					return err
				}
			}
			return nil
		}
	}
	service := func(id uint32, backends ...uint32) func(*Datapath) error {
		return func(d *Datapath) error { return d.UpsertService(feTCP, Service{ID: id, Backends: backends}) }
	}
	reuseID1 := func(d *Datapath) error { return d.UpsertBackend(1, other) }
	restoreID1 := func(d *Datapath) error { return d.UpsertBackend(1, backendB) }
	ct := func(id uint32) func(*Datapath) error {
		return func(d *Datapath) error { return checkCTFlow(d, syn, id) }
	}
	start := oneService(feTCP, Service{ID: 1, Backends: []uint32{1}})
	fromPodRow := func(name string, seed *lbState, in pkt, verdict uint32, out []byte, reason string, then func(*Datapath) error) lbCase {
		return lbCase{seed: seed, prog: fromPod, dir: "from-pod", then: then, progCase: progCase{name: name,
			endpoints: seedB, in: in.build(), verdict: verdict, out: out, reason: reason}}
	}
	runLBCases(t, d, []lbCase{
		fromPodRow("SYN: backend 1", start, syn, tcActRedirect, toB, "FORWARDED", do(ct(1), service(1, 2), reuseID1)),
		fromPodRow("ACK after id 1 was reused for another Service's pod: chooses again, not 10.2.0.99",
			nil, ack, tcActOK, toRemote(ack), "PASS_STACK", ct(2)),
		fromPodRow("SYN: backend 1 again", start, syn, tcActRedirect, toB, "FORWARDED", do(ct(1), service(1, 2), reuseID1)),
		fromPodRow("SYN on the same ports with its entry pointing at the reused id: chooses afresh",
			nil, syn, tcActOK, toRemote(syn), "PASS_STACK", ct(2)),
		fromPodRow("SYN: backend 1, then the frontend goes to another Service (id 2) with the same pods",
			start, syn, tcActRedirect, toB, "FORWARDED", do(service(2, 1, 2), func(d *Datapath) error { return d.UpsertService(feTCP, Service{ID: 2, Backends: []uint32{2}}) })),
		fromPodRow("ACK of the old Service's flow: chooses from the new Service",
			nil, ack, tcActOK, toRemote(ack), "PASS_STACK", ct(2)),
		fromPodRow("SYN: backend 1, established by an ACK", start, syn, tcActRedirect, toB, "FORWARDED", nil),
		fromPodRow("ACK: established, backend 1 kept", nil, ack, tcActRedirect, delivered(ack.withDst(podBIP, 8080)), "FORWARDED",
			do(service(1, 2), restoreID1)),
		fromPodRow("ACK after backend 1 left the pool (terminating): kept, the connection finishes",
			nil, ack, tcActRedirect, delivered(ack.withDst(podBIP, 8080)), "FORWARDED", ct(1)),
		fromPodRow("SYN reusing the ports of that flow: a new connection, never the terminating backend",
			nil, syn, tcActOK, toRemote(syn), "PASS_STACK", ct(2)),
		fromPodRow("SYN: backend 1, handshake open", start, syn, tcActRedirect, toB, "FORWARDED", service(1, 2)),
		fromPodRow("repeated SYN after backend 1 became terminating: backend 2",
			nil, syn, tcActOK, toRemote(syn), "PASS_STACK", ct(2)),
	})

	// A repeated SYN while backend 1 is still at its place keeps it: with
	// random selection over two backends, eight repeats all landing on 1
	// by chance would be 1 in 256.
	if err := seedLB(d, *start); err != nil {
		t.Fatal(err)
	}
	if err := checkCase(d, fromPod, "from-pod", progCase{endpoints: seedB, in: syn.build(), verdict: tcActRedirect, out: toB, reason: "FORWARDED"}); err != nil {
		t.Fatal(err)
	}
	if err := service(1, 1, 2)(d); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if err := checkCase(d, fromPod, "from-pod", progCase{endpoints: seedB, in: syn.build(), verdict: tcActRedirect, out: toB, reason: "FORWARDED"}); err != nil {
			t.Fatalf("repeat %d of the SYN: %v", i, err)
		}
	}
}

// The datapath records each flow's state for the GC: SYN, established
// after the client's next segment, closing after a FIN or RST either way. A
// pod's flow never awaits its backend's answer (pods' sources are checked).
func TestPrivilegedLBConntrackStates(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	reply := ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40000)
	fwd, rev := ctFlowKeys(syn, backendB)
	established, closing := uint16(myelinCtFlagsCT_F_ESTABLISHED), uint16(myelinCtFlagsCT_F_CLOSING)
	awaiting := uint16(myelinCtFlagsCT_F_AWAITING_REPLY)
	flags := func(key myelinCtKey, want uint16) func(*Datapath) error {
		return func(d *Datapath) error {
			v, err := ctEntryOf(d.objs.MyelinLbCt, key)
			if err != nil {
				return err
			}
			if got := v.Flags & (established | closing | awaiting); got != want {
				return fmt.Errorf("entry %+v: state flags %#x, want %#x", key, got, want)
			}
			if v.LastSeen == 0 {
				return fmt.Errorf("entry %+v: last_seen not set", key)
			}
			return nil
		}
	}
	runLBCases(t, d, []lbCase{
		{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{1}}), prog: d.objs.MyelinFromPod, dir: "from-pod", then: flags(fwd, 0),
			progCase: progCase{name: "SYN: state syn", endpoints: seedB, in: syn.build(), verdict: tcActRedirect, out: delivered(syn.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: d.objs.MyelinToPod, dir: "to-pod", then: flags(rev, 0),
			progCase: progCase{name: "SYN-ACK: translated, still syn", in: reply.withTCPFlags(0x12).build(), verdict: tcActOK, out: reply.withTCPFlags(0x12).withSrc(vip, 80).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", then: flags(fwd, established),
			progCase: progCase{name: "ACK: established", endpoints: seedB, in: syn.withTCPFlags(tcpACK).build(), verdict: tcActRedirect, out: delivered(syn.withTCPFlags(tcpACK).withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: d.objs.MyelinToPod, dir: "to-pod", then: flags(rev, closing),
			progCase: progCase{name: "backend's FIN: closing", in: reply.withTCPFlags(tcpFINACK).build(), verdict: tcActOK, out: reply.withTCPFlags(tcpFINACK).withSrc(vip, 80).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", then: flags(fwd, established|closing),
			progCase: progCase{name: "client's RST: closing", endpoints: seedB, in: syn.withTCPFlags(tcpRST).build(), verdict: tcActRedirect, out: delivered(syn.withTCPFlags(tcpRST).withDst(podBIP, 8080)), reason: "FORWARDED"}},
	})
}

// A NodePort flow to a local backend awaits its backend's answer: a blind client
// (a forged source) can make its own segments look established, and make a
// half-open backend ACK exactly its SYN, but only a completed handshake shows
// the backend acknowledging client data past the SYN, or sending data. (The
// flow lives in the LRU myelin_lb_ct_nodeport_syn until its client
// acknowledges the backend's SYN-ACK: lb_nodeport_ct_test.go.)
func TestPrivilegedLBNodePortAwaitsBackend(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort).withSeq(1000, 0)
	fwd, rev := ctFlowKeys(req, backendB)
	reply := fromPodB(ipv4(protoTCP, podBIP, extHost).withSrc(podBIP, 8080).withDst(extHost, 40000))
	established, awaiting := uint16(myelinCtFlagsCT_F_ESTABLISHED), uint16(myelinCtFlagsCT_F_AWAITING_REPLY)
	// The client never acknowledges a SYN-ACK here: the flow stays in the LRU.
	flags := func(key myelinCtKey, mask, want uint16) func(*Datapath) error {
		return func(d *Datapath) error {
			v, err := ctEntryOf(d.objs.MyelinLbCtNodeportSyn, key)
			if err != nil {
				return fmt.Errorf("entry %+v in myelin_lb_ct_nodeport_syn: %w", key, err)
			}
			if got := v.Flags & mask; got != want {
				return fmt.Errorf("entry %+v: flags %#x of %#x, want %#x", key, got, mask, want)
			}
			return nil
		}
	}
	toB := func(p pkt) []byte { return delivered(p.withDst(podBIP, 8080)) }
	back := func(p pkt) []byte { return p.withSrc(nodeIP, nodePort).build() }
	fromClient := func(name string, p pkt, then func(*Datapath) error) lbCase {
		return lbCase{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: then,
			progCase: progCase{name: name, endpoints: seedB, in: p.build(), verdict: tcActRedirect, out: toB(p), reason: "FORWARDED"}}
	}
	fromBackend := func(name string, p pkt, then func(*Datapath) error) lbCase {
		return lbCase{prog: d.objs.MyelinFromPod, dir: "from-pod", then: then,
			progCase: progCase{name: name, endpoints: seedB, in: p.build(), verdict: tcActOK, out: back(p), reason: "PASS_STACK"}}
	}
	cases := []lbCase{
		fromClient("SYN: awaiting the backend", req, flags(rev, awaiting, awaiting)),
		fromBackend("SYN-ACK: still awaiting", reply.withTCPFlags(0x12).withSeq(5000, 1001).bare(), flags(rev, awaiting, awaiting)),
		// A second SYN of a lower number on the tuple does not move what the backend must pass.
		fromClient("another SYN, of a lower number", req.withSeq(0, 0), flags(rev, awaiting, awaiting)),
		fromClient("a PSH-only segment out of the window: looks established", req.withTCPFlags(0x08).withSeq(1<<31, 0).bare(), flags(fwd, established, established)),
		fromBackend("the half-open backend's ACK of exactly the SYN: still awaiting", reply.withTCPFlags(tcpACK).withSeq(5001, 1001).bare(), flags(rev, awaiting, awaiting)),
		fromBackend("its ACK of client data: answered", reply.withTCPFlags(tcpACK).withSeq(5001, 1020).bare(), flags(rev, awaiting, 0)),
	}
	cases[0].seed = oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})
	runLBCases(t, d, cases)
	// Data from the backend answers as well (a server that speaks first).
	if err := seedLB(d, *oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}})); err != nil {
		t.Fatal(err)
	}
	runLBCases(t, d, []lbCase{
		fromClient("SYN: awaiting the backend", req, flags(rev, awaiting, awaiting)),
		fromBackend("the backend's data: answered", reply.withTCPFlags(0x18).withSeq(5001, 1001), flags(rev, awaiting, 0)),
	})
}

// A flow whose reverse entry went missing gets it back from its forward
// entry (checked once a second per flow), so replies are translated again;
// a closing flow does not, its ports may belong to a new connection.
func TestPrivilegedLBReverseRebuilt(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	ack := syn.withTCPFlags(tcpACK)
	reply := ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40000).withTCPFlags(tcpACK)
	fwd, rev := ctFlowKeys(syn, backendB)
	lose := func(d *Datapath) error {
		if err := d.objs.MyelinLbCt.Delete(rev); err != nil {
			return err
		}
		return ctAge(d.objs.MyelinLbCt, fwd, 0) // last refreshed long ago: the next packet checks
	}
	reverse := func(want bool) func(*Datapath) error {
		return func(d *Datapath) error { return checkCTReply(d, reply, want) }
	}
	do := func(a, b func(*Datapath) error) func(*Datapath) error {
		return func(d *Datapath) error {
			if err := a(d); err != nil {
				return err
			}
			return b(d)
		}
	}
	toB := func(p pkt) []byte { return delivered(p.withDst(podBIP, 8080)) }
	runLBCases(t, d, []lbCase{
		{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{1}}), prog: d.objs.MyelinFromPod, dir: "from-pod", then: lose,
			progCase: progCase{name: "SYN, then the reverse entry is lost", endpoints: seedB, in: syn.build(), verdict: tcActRedirect, out: toB(syn), reason: "FORWARDED"}},
		{prog: d.objs.MyelinToPod, dir: "to-pod",
			progCase: progCase{name: "meanwhile a reply passes untranslated", in: reply.build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", then: reverse(true),
			progCase: progCase{name: "the client's next segment writes it again", endpoints: seedB, in: ack.build(), verdict: tcActRedirect, out: toB(ack), reason: "FORWARDED"}},
		{prog: d.objs.MyelinToPod, dir: "to-pod",
			progCase: progCase{name: "the reply comes from the ClusterIP again", in: reply.build(), verdict: tcActOK, out: reply.withSrc(vip, 80).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", then: do(lose, reverse(false)),
			progCase: progCase{name: "FIN: closing, then the reverse entry is lost", endpoints: seedB, in: syn.withTCPFlags(tcpFINACK).build(), verdict: tcActRedirect, out: toB(syn.withTCPFlags(tcpFINACK)), reason: "FORWARDED"}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", then: reverse(false),
			progCase: progCase{name: "closing flow: not written again", endpoints: seedB, in: ack.build(), verdict: tcActRedirect, out: toB(ack), reason: "FORWARDED"}},
	})
}

func TestServiceCTTimeouts(t *testing.T) {
	established, closing := uint16(myelinCtFlagsCT_F_ESTABLISHED), uint16(myelinCtFlagsCT_F_CLOSING)
	for _, c := range []struct {
		proto uint8
		flags uint16
		want  time.Duration
	}{
		{protoTCP, 0, ServiceCTTimeoutTCPSyn},
		{protoTCP, established, ServiceCTTimeoutTCPEstablished},
		{protoTCP, closing, ServiceCTTimeoutTCPClosing},
		{protoTCP, established | closing, ServiceCTTimeoutTCPClosing},
		// The client's segments alone (a forged source's): the backend never answered.
		{protoTCP, established | uint16(myelinCtFlagsCT_F_AWAITING_REPLY), ServiceCTTimeoutTCPSyn},
		{protoUDP, 0, ServiceCTTimeoutUDP},
	} {
		if got := ctTimeout(c.proto, c.flags); got != c.want {
			t.Errorf("ctTimeout(%d, %#x) = %v, want %v", c.proto, c.flags, got, c.want)
		}
	}
	if ServiceCTMaxTimeout < ServiceCTTimeoutTCPEstablished || ServiceCTMaxTimeout < ServiceCTTimeoutUDP {
		t.Errorf("ServiceCTMaxTimeout %v is shorter than a state's timeout", ServiceCTMaxTimeout)
	}
}

// GCServiceCT removes both entries of flows idle past their state's
// timeout, in both tables, and orphaned entries, and keeps the rest; a
// flow's age is its fresher entry's. Timestamps are seeded, not waited for.
func TestPrivilegedGCServiceCT(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedLB(d, lbState{backends: lbBackends}); err != nil {
		t.Fatal(err)
	}
	now := 10 * time.Hour
	established, closing := uint16(myelinCtFlagsCT_F_ESTABLISHED), uint16(myelinCtFlagsCT_F_CLOSING)
	type seeded struct {
		name  string
		m     *ebpf.Map
		proto uint8
		flags uint16 // on the forward entry
		idle  time.Duration
		keep  bool
	}
	pods, nodePorts, awaiting := d.objs.MyelinLbCt, d.objs.MyelinLbCtNodeport, d.objs.MyelinLbCtNodeportSyn
	flows := []seeded{
		{"syn, 59 s", pods, protoTCP, 0, 59 * time.Second, true},
		{"syn, 61 s", pods, protoTCP, 0, 61 * time.Second, false},
		{"established, 5 h", pods, protoTCP, established, 5 * time.Hour, true},
		{"established, 7 h", pods, protoTCP, established, 7 * time.Hour, false},
		{"closing, 5 s", pods, protoTCP, established | closing, 5 * time.Second, true},
		{"closing, 11 s", pods, protoTCP, established | closing, 11 * time.Second, false},
		{"udp, 30 s", pods, protoUDP, 0, 30 * time.Second, true},
		{"udp, 61 s", pods, protoUDP, 0, 61 * time.Second, false},
		{"NodePort syn, 61 s", nodePorts, protoTCP, 0, 61 * time.Second, false},
		{"NodePort established, 1 h", nodePorts, protoTCP, established, time.Hour, true},
		// The LRU evicts only when full: its idle flows are collected too.
		{"NodePort awaiting, 61 s", awaiting, protoTCP, 0, 61 * time.Second, false},
		{"NodePort awaiting, 59 s", awaiting, protoTCP, 0, 59 * time.Second, true},
		{"NodePort UDP, 30 s", awaiting, protoUDP, 0, 30 * time.Second, true},
		{"NodePort UDP, 61 s", awaiting, protoUDP, 0, 61 * time.Second, false},
	}
	type entry struct {
		m   *ebpf.Map
		key myelinCtKey
	}
	var kept, gone []entry
	for i, f := range flows {
		p := ipv4(f.proto, podA, vip).withDst(vip, 80).withSrc(podA, uint16(1000+i))
		fk, rk := ctFlowKeys(p, backendB)
		fv := myelinCtEntry{BackendId: 1, SvcId: 1, BeAddr: rk.Saddr, BePort: rk.Sport, Flags: f.flags, LastSeen: uint64(now - f.idle)}
		rv := myelinCtEntry{FrontAddr: fk.Daddr, ClientAddr: fk.Saddr, FrontPort: fk.Dport, LastSeen: uint64(now - f.idle)}
		for _, kv := range []struct {
			k myelinCtKey
			v myelinCtEntry
		}{{fk, fv}, {rk, rv}} {
			if err := f.m.Update(kv.k, kv.v, ebpf.UpdateAny); err != nil {
				t.Fatal(err)
			}
			if f.keep {
				kept = append(kept, entry{f.m, kv.k})
			} else {
				gone = append(gone, entry{f.m, kv.k})
			}
		}
	}
	// The reverse entry saw the FIN, the forward one is established: closing, collected.
	p := ipv4(protoTCP, podA, vip).withDst(vip, 80).withSrc(podA, 2000)
	fk, rk := ctFlowKeys(p, backendB)
	for _, kv := range []struct {
		k     myelinCtKey
		flags uint16
	}{{fk, established}, {rk, closing}} {
		v := myelinCtEntry{FrontAddr: fk.Daddr, ClientAddr: fk.Saddr, FrontPort: fk.Dport, Flags: kv.flags, LastSeen: uint64(now - time.Minute)}
		if err := pods.Update(kv.k, v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, entry{pods, kv.k})
	}
	// A NodePort flow a forged source made look established (two flag-less segments)
	// while its backend never answered past the handshake: the SYN timeout.
	p = ipv4(protoTCP, extHost, vip).withDst(vip, 80).withSrc(extHost, 2003)
	fk, rk = ctFlowKeys(p, backendB)
	for _, kv := range []struct {
		k     myelinCtKey
		flags uint16
	}{{fk, established}, {rk, uint16(myelinCtFlagsCT_F_AWAITING_REPLY)}} {
		v := myelinCtEntry{FrontAddr: fk.Daddr, ClientAddr: fk.Saddr, FrontPort: fk.Dport, Flags: kv.flags, LastSeen: uint64(now - 61*time.Second)}
		if err := nodePorts.Update(kv.k, v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, entry{nodePorts, kv.k})
	}
	// A UDP flow whose reverse entry is fresh (the server streams) stays.
	p = ipv4(protoUDP, podA, vip).withDst(vip, 80).withSrc(podA, 2001)
	fk, rk = ctFlowKeys(p, backendB)
	for _, kv := range []struct {
		k    myelinCtKey
		idle time.Duration
	}{{fk, time.Hour}, {rk, time.Second}} {
		v := myelinCtEntry{FrontAddr: fk.Daddr, ClientAddr: fk.Saddr, FrontPort: fk.Dport, LastSeen: uint64(now - kv.idle)}
		if err := pods.Update(kv.k, v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, entry{pods, kv.k})
	}
	// An orphaned reverse entry, idle: removed.
	_, rk = ctFlowKeys(p.withSrc(podA, 2002), backendB)
	if err := pods.Update(rk, myelinCtEntry{ClientAddr: fk.Saddr, FrontAddr: fk.Daddr, FrontPort: fk.Dport}, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	gone = append(gone, entry{pods, rk})

	svcIDs, beIDs, err := d.ConntrackIDs()
	if err != nil || !slices.Equal(svcIDs, []uint32{1}) || !slices.Equal(beIDs, []uint32{1}) {
		t.Errorf("ConntrackIDs = %v, %v, %v; want the seeded forward entries' [1], [1]", svcIDs, beIDs, err)
	}
	removed, err := d.GCServiceCT(now)
	if err != nil {
		t.Fatal(err)
	}
	if removed != len(gone) {
		t.Errorf("GCServiceCT removed %d entries, want %d", removed, len(gone))
	}
	for _, e := range kept {
		if _, err := ctEntryOf(e.m, e.key); err != nil {
			t.Errorf("%v entry %+v: %v, want kept", e.m, e.key, err)
		}
	}
	for _, e := range gone {
		if _, err := ctEntryOf(e.m, e.key); err == nil {
			t.Errorf("%v entry %+v still there, want collected", e.m, e.key)
		}
	}
	for _, at := range []time.Duration{now, time.Second} {
		if n, err := d.GCServiceCT(at); err != nil || n != 0 {
			t.Errorf("GCServiceCT(%v) again = %d, %v; want 0", at, n, err)
		}
	}
	// A flow awaiting its backend holds its ids as much as any other.
	fk, _ = ctFlowKeys(ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort), backendB)
	if err := awaiting.Update(fk, myelinCtEntry{SvcId: 7, BackendId: 3, LastSeen: uint64(now)}, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	svcIDs, beIDs, err = d.ConntrackIDs()
	if err != nil || !slices.Contains(svcIDs, 7) || !slices.Contains(beIDs, 3) {
		t.Errorf("ConntrackIDs = %v, %v, %v; want service 7 and backend 3 of the awaiting flow among them", svcIDs, beIDs, err)
	}
}

// A backend that left one Service's pool but stays another's keeps its id, so
// the first Service's open flows, pinned to it by their conntrack entries,
// would go on to it: EndServiceFlows deletes the entries (both directions)
// of the flows of that (service, backend) pair, and their next packet
// chooses a current backend of their own Service; the other Service's flow to
// the same backend is kept.
func TestPrivilegedLBEndServiceFlows(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod := d.objs.MyelinFromPod
	feS2 := Frontend{Addr: mustAddr("10.96.0.20"), Port: 53, Proto: protoUDP}
	s1 := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	// Another client port: the two flows to X must not share a reverse entry.
	s2 := ipv4(protoUDP, podA, "10.96.0.20").withSrc(podA, 40001).withDst("10.96.0.20", 53)
	toX := func(p pkt) []byte { return delivered(p.withDst(podBIP, 8080)) } // backend 1, pod B
	toY := s1.withDst(remoteIP, 8080).build()                               // backend 2, on another node
	both := &lbState{backends: lbBackends, services: map[Frontend]Service{
		feUDP: {ID: 1, Backends: []uint32{1}}, feS2: {ID: 2, Backends: []uint32{1}}}}
	xLeavesS1 := func(d *Datapath) error { return d.UpsertService(feUDP, Service{ID: 1, Backends: []uint32{2}}) }
	s1Fwd, s1Rev := ctFlowKeys(s1, backendB)
	s2Fwd, s2Rev := ctFlowKeys(s2, backendB)
	entries := func(want bool, keys ...myelinCtKey) error {
		for _, k := range keys {
			_, err := ctEntryOf(d.objs.MyelinLbCt, k)
			if want && err != nil {
				return fmt.Errorf("entry %+v: %w", k, err)
			}
			if !want && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("entry %+v: still there (%v)", k, err)
			}
		}
		return nil
	}
	end := func(d *Datapath) error {
		n, err := d.EndServiceFlows(map[ServiceBackend]bool{{Service: 1, Backend: 1}: true})
		if err != nil || n != 2 {
			return fmt.Errorf("EndServiceFlows = %d, %v; want the 2 entries of s1's flow", n, err)
		}
		return errors.Join(entries(false, s1Fwd, s1Rev), entries(true, s2Fwd, s2Rev))
	}
	row := func(name string, seed *lbState, in pkt, verdict uint32, out []byte, reason string, then func(*Datapath) error) lbCase {
		return lbCase{seed: seed, prog: fromPod, dir: "from-pod", then: then, progCase: progCase{name: name,
			endpoints: seedB, in: in.build(), verdict: verdict, out: out, reason: reason}}
	}
	runLBCases(t, d, []lbCase{
		row("s1's flow: X", both, s1, tcActRedirect, toX(s1), "FORWARDED", nil),
		row("s2's flow: X", nil, s2, tcActRedirect, toX(s2), "FORWARDED", xLeavesS1),
		row("X left s1, s2 keeps it: s1's open flow still goes to X", nil, s1, tcActRedirect, toX(s1), "FORWARDED", end),
		row("after EndServiceFlows: s1's flow chooses from s1's pool", nil, s1, tcActOK, toY, "PASS_STACK",
			func(d *Datapath) error { return checkCTFlow(d, s1, 2) }),
		row("s2's flow keeps X", nil, s2, tcActRedirect, toX(s2), "FORWARDED", func(d *Datapath) error { return checkCTFlow(d, s2, 1) }),
	})
	if n, err := d.EndServiceFlows(nil); err != nil || n != 0 {
		t.Errorf("EndServiceFlows(no pairs) = %d, %v; want 0", n, err)
	}
}
