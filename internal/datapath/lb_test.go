package datapath

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// lbCase is a program row run after the service state is reset to seed
// (nil: the state of the previous row is kept, flows included).
type lbCase struct {
	progCase
	prog *ebpf.Program
	dir  string
	seed *lbState
	then func(d *Datapath) error // checked after the row
}

// runLBCases runs the rows in order, each a subtest.
func runLBCases(t *testing.T, d *Datapath, cases []lbCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.seed != nil {
				if err := seedLB(d, *c.seed); err != nil {
					t.Fatal(err)
				}
			}
			if err := checkCase(d, c.prog, c.dir, c.progCase); err != nil {
				t.Error(err)
			}
			if c.then != nil {
				if err := c.then(d); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// oneService is a state with backends 1 (pod B) and 2 (remote) and one service.
func oneService(fe Frontend, s Service) *lbState {
	return &lbState{backends: lbBackends, services: map[Frontend]Service{fe: s}}
}

// ClusterIP DNAT from a pod, conntrack reuse and reselection, and the
// reverse translation of replies wherever they enter the client pod.
func TestPrivilegedLBClusterIP(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod, fromNetdev, toPod := d.objs.MyelinFromPod, d.objs.MyelinFromNetdev, d.objs.MyelinToPod

	tcp := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	udp := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	toB := oneService(feTCP, Service{ID: 1, Backends: []uint32{1}})
	udpToB := oneService(feUDP, Service{ID: 3, Backends: []uint32{1}})
	// A reply of backend 2 to pod A, as it arrives at this node and as the client must see it.
	reply := ipv4(protoTCP, remoteIP, podA).withSrc(remoteIP, 8080).withDst(podA, 40000).withTCPFlags(0x12)
	restored := reply.withSrc(vip, 80)
	ct := func(id uint32) func(*Datapath) error {
		return func(d *Datapath) error { return checkCTFlow(d, tcp, id) }
	}
	switchTo2 := func(d *Datapath) error { return d.UpsertService(feTCP, Service{ID: 1, Backends: []uint32{2}}) }

	cases := []lbCase{
		{seed: toB, prog: fromPod, dir: "from-pod", then: ct(1), progCase: progCase{name: "TCP to ClusterIP: DNAT to local backend",
			endpoints: seedB, in: tcp.build(), verdict: tcActRedirect, out: delivered(tcp.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{seed: udpToB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "UDP to ClusterIP: DNAT to local backend",
			endpoints: seedB, in: udp.build(), verdict: tcActRedirect, out: delivered(udp.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{seed: udpToB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "UDP without checksum stays without",
			endpoints: seedB, in: udp.withoutUDPChecksum().build(), verdict: tcActRedirect, out: delivered(udp.withoutUDPChecksum().withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{seed: toB, prog: fromPod, dir: "from-pod", then: switchTo2, progCase: progCase{name: "first packet picks backend 1",
			endpoints: seedB, in: tcp.build(), verdict: tcActRedirect, out: delivered(tcp.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: func(d *Datapath) error { return d.DeleteBackend(1) }, progCase: progCase{name: "conntrack keeps backend 1 after the service moved to 2",
			endpoints: seedB, in: tcp.withTCPFlags(0x10).build(), verdict: tcActRedirect, out: delivered(tcp.withTCPFlags(0x10).withDst(podBIP, 8080)), reason: "FORWARDED"}},
		// Without a test-run context the FIB lookup fails: the stack gets the translated packet.
		{prog: fromPod, dir: "from-pod", then: ct(2), progCase: progCase{name: "deleted backend: the flow picks again",
			endpoints: seedB, in: tcp.withTCPFlags(0x10).build(), verdict: tcActOK, out: tcp.withTCPFlags(0x10).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "reply delivered by the stack: source back to the ClusterIP",
			in: reply.build(), verdict: tcActOK, out: restored.build(), reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "reply from another node: endpoint_deliver restores the ClusterIP",
			endpoints: seedA, in: reply.build(), verdict: tcActRedirect, out: delivered(restored), reason: "FORWARDED"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "not a reply: untouched",
			in: reply.withSrc(remoteIP, 9999).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "pod to pod: no service lookup",
			endpoints: seedB, in: ipv4(protoTCP, podA, podBIP).build(), verdict: tcActRedirect, out: delivered(ipv4(protoTCP, podA, podBIP)), reason: "FORWARDED"}},
		{seed: toB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "other port of the ClusterIP: untouched",
			endpoints: seedB, in: tcp.withDst(vip, 81).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		// A header cut short is not parsed (20 bytes TCP, 8 UDP), though its ports are there.
		{seed: toB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "TCP header cut to 14 bytes: untouched",
			endpoints: seedB, in: tcp.withL4Cut(14).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{seed: udpToB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "UDP header cut to 6 bytes: untouched",
			endpoints: seedB, in: udp.withL4Cut(6).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "reply with a TCP header cut to 14 bytes: untouched",
			in: reply.withL4Cut(14).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{seed: toB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "ICMP to the ClusterIP: untouched",
			endpoints: seedB, in: ipv4(protoICMP, podA, vip).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{seed: toB, prog: fromPod, dir: "from-pod", progCase: progCase{name: "later fragment: untouched",
			endpoints: seedB, in: tcp.withFragOffset(185).build(), verdict: tcActOK, reason: "PASS_STACK"}},
	}
	runLBCases(t, d, cases)
}

// A connection straight to a backend pod that reuses the ports of an earlier
// connection through the service: its SYN clears the service flow's reply
// translation, which would otherwise make its replies come from the ClusterIP.
func TestPrivilegedLBDirectAfterService(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod := d.objs.MyelinFromPod

	viaService := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	direct := ipv4(protoTCP, podA, podBIP).withDst(podBIP, 8080) // the same ports as the service flow's backend side
	reply := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40000).withTCPFlags(0x12))
	// Pod B sends the replies; pod A gets pod B's veth fixture, so delivered() fits it.
	seedReply := map[string]EndpointInfo{podA: podB, podBIP: podB}
	reverse := func(want bool) func(*Datapath) error {
		return func(d *Datapath) error { return checkCTReply(d, reply, want) }
	}
	cases := []lbCase{
		{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{1}}), prog: fromPod, dir: "from-pod", then: reverse(true), progCase: progCase{
			name: "through the service: DNAT and a reply translation", endpoints: seedB, in: viaService.build(), verdict: tcActRedirect,
			out: delivered(viaService.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: reverse(true), progCase: progCase{
			name: "direct non-SYN segment: the translation stays", endpoints: seedB, in: direct.withTCPFlags(0x10).build(), verdict: tcActRedirect,
			out: delivered(direct.withTCPFlags(0x10)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: reverse(false), progCase: progCase{
			name: "direct SYN on the same ports: the stale translation goes", endpoints: seedB, in: direct.build(), verdict: tcActRedirect,
			out: delivered(direct), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{
			name: "the direct connection's reply reaches the client untranslated", endpoints: seedReply, in: reply.build(), verdict: tcActRedirect,
			out: delivered(reply), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: reverse(true), progCase: progCase{
			name: "through the service again on the same ports: the translation is back", endpoints: seedB, in: viaService.build(), verdict: tcActRedirect,
			out: delivered(viaService.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", then: goneButTranslated, progCase: progCase{
			name: "and its reply comes from the ClusterIP", endpoints: seedReply, in: reply.build(), verdict: tcActRedirect,
			out: delivered(reply.withSrc(vip, 80)), reason: "FORWARDED"}},
		// The SYN looks for a stale entry only to a port a backend uses or used
		// (myelin_lb_ports keeps a removed backend's port).
		{prog: fromPod, dir: "from-pod", then: reverse(false), progCase: progCase{
			name: "direct SYN after the Service and its backend are gone: the stale translation goes", endpoints: seedB, in: direct.build(), verdict: tcActRedirect,
			out: delivered(direct), reason: "FORWARDED"}},
	}
	runLBCases(t, d, cases)
}

// goneButTranslated deletes feTCP's Service and backend 1 and requires the
// translation of the reply in TestPrivilegedLBDirectAfterService to stay.
func goneButTranslated(d *Datapath) error {
	if err := d.DeleteService(feTCP); err != nil {
		return err
	}
	if err := d.DeleteBackend(1); err != nil {
		return err
	}
	reply := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40000).withTCPFlags(0x12))
	return checkCTReply(d, reply, true)
}

// A pod reaching its own service as the backend: SNAT to the hairpin
// address both ways, delivered straight back in both host routing modes.
func TestPrivilegedLBHairpin(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			req := fromPodB(ipv4(protoTCP, podBIP, vip).withDst(vip, 80))
			reply := fromPodB(ipv4(protoTCP, podBIP, hairpin).withSrc(podBIP, 8080).withDst(hairpin, 40000).withTCPFlags(0x12))
			cases := []lbCase{
				{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{1}}), prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{
					name: "request: source to the hairpin address", endpoints: seedB, in: req.build(), verdict: tcActRedirect,
					out: delivered(req.withSrc(hairpin, 40000).withDst(podBIP, 8080)), reason: "FORWARDED"}},
				{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{
					name: "reply: from the ClusterIP to the pod", endpoints: seedB, in: reply.build(), verdict: tcActRedirect,
					out: delivered(reply.withSrc(vip, 80).withDst(podBIP, 40000)), reason: "FORWARDED"}},
			}
			runLBCases(t, d, cases)
		})
	}
}

// A pod reaching its own Service whose policy allows nothing, not even
// itself: the hairpin request and its reply pass, as they do with socket-LB
// (over the pod's loopback, where no check runs), while the same pod's own
// connection to another pod stays denied. UDP too: no TCP state involved.
func TestPrivilegedLBHairpinIsolatedPod(t *testing.T) {
	requirePrivileged(t)
	isolated := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyEgress}}
	req := fromPodB(ipv4(protoTCP, podBIP, vip).withDst(vip, 80))
	reply := fromPodB(ipv4(protoTCP, podBIP, hairpin).withSrc(podBIP, 8080).withDst(hairpin, 40000).withTCPFlags(0x12))
	udpReq := fromPodB(ipv4(protoUDP, podBIP, vip).withDst(vip, 53))
	udpReply := fromPodB(ipv4(protoUDP, podBIP, hairpin).withSrc(podBIP, 8080).withDst(hairpin, 40000))
	direct := fromPodB(ipv4(protoTCP, podBIP, podA).withDst(podA, 8080))
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			if err := seedLB(d, lbState{backends: lbBackends, services: map[Frontend]Service{
				feTCP: {ID: 1, Backends: []uint32{1}}, feUDP: {ID: 2, Backends: []uint32{1}}}}); err != nil {
				t.Fatal(err)
			}
			rows := []policyRow{
				{seed: isolated, prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "TCP request through the ClusterIP to itself", endpoints: seedB, in: req.build(), verdict: tcActRedirect,
					out: delivered(req.withSrc(hairpin, 40000).withDst(podBIP, 8080)), reason: "FORWARDED"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "its reply, from the ClusterIP", endpoints: seedB, in: reply.build(), verdict: tcActRedirect,
					out: delivered(reply.withSrc(vip, 80).withDst(podBIP, 40000)), reason: "FORWARDED"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "UDP request through the ClusterIP to itself", endpoints: seedB, in: udpReq.build(), verdict: tcActRedirect,
					out: delivered(udpReq.withSrc(hairpin, 40000).withDst(podBIP, 8080)), reason: "FORWARDED"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "its UDP reply", endpoints: seedB, in: udpReply.build(), verdict: tcActRedirect,
					out: delivered(udpReply.withSrc(vip, 53).withDst(podBIP, 40000)), reason: "FORWARDED"}},
				{prog: d.objs.MyelinFromPod, counterDir: "from-pod", progCase: progCase{
					name: "its own SYN to another pod: denied", in: direct.build(), verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
			}
			runPolicyRows(t, d, rows)
		})
	}
}

// A service without ready backends answers with ICMP port unreachable back
// into the pod, counted and evented as DROP_SVC_NO_BACKEND.
func TestPrivilegedLBNoBackend(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	r, err := d.NewEventReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	empty := &lbState{backends: lbBackends, services: map[Frontend]Service{
		feTCP: {ID: 1}, feUDP: {ID: 2}, feNodePort: {ID: 3, Flags: ServiceNodePort},
	}}
	syn := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	udp := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	udp.payload = nil // shorter than the answer: the packet grows
	withOpts := syn.withOptions([]byte{0x01, 0x01, 0x01, 0x00})
	ext := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	row := func(name string, prog *ebpf.Program, dir string, p pkt) lbCase {
		in := p.build()
		return lbCase{seed: empty, prog: prog, dir: dir, progCase: progCase{name: name, endpoints: seedB,
			in: in, verdict: tcActRedirect, out: portUnreachable(in), reason: "DROP_SVC_NO_BACKEND"}}
	}
	runLBCases(t, d, []lbCase{
		row("TCP SYN from a pod", d.objs.MyelinFromPod, "from-pod", syn),
		row("UDP from a pod", d.objs.MyelinFromPod, "from-pod", udp),
		row("IPv4 options are quoted", d.objs.MyelinFromPod, "from-pod", withOpts),
		row("NodePort from outside", d.objs.MyelinFromNetdev, "from-netdev", ext),
	})
	for _, p := range []pkt{syn, udp, withOpts, ext} {
		if out := portUnreachable(p.build()); !ipv4HeaderValid(out) || !l4ChecksumValid(out) {
			t.Errorf("expected answer to %x has bad checksums", p.build())
		}
	}
	if err := drainEvents(r); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertEndpoint(mustAddr(podA), podASender); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runPacket(d.objs.MyelinFromPod, syn.build(), ctxPodA); err != nil {
		t.Fatal(err)
	}
	ev, ok := readEvent(t, r, time.Second)
	want := Event{Type: "drop", Reason: "DROP_SVC_NO_BACKEND", Direction: "from-pod", IfIndex: 1,
		Src: mustAddr(podA), Dst: mustAddr(vip), Proto: protoTCP, SrcPort: 40000, DstPort: 80, Len: uint32(len(syn.build()))}
	if !ok || ev != want {
		t.Errorf("event = %+v (%v), want %+v", ev, ok, want)
	}
}

// With load balancing off, nothing is translated even with service entries
// in the (one-entry) maps: every branch is pruned.
func TestPrivilegedLBDisabled(t *testing.T) {
	requirePrivileged(t)
	d := loadTest(t, HostRoutingBPF)
	key, _ := serviceKey(feTCP)
	if err := d.objs.MyelinLbServices.Update(key, myelinLbSvc{Id: 1, Count: 1}, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.MyelinLbSlots.Update(myelinLbSlotKey{SvcId: 1}, uint32(1), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	be := myelinLbBackend{Addr: networkUint32(backendB.Addr), Port: htons(8080)}
	if err := d.objs.MyelinLbBackends.Update(uint32(1), be, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	if err := d.UpsertService(feTCP, Service{ID: 1}); err == nil {
		t.Error("UpsertService with load balancing off: no error")
	}
	tcp := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	runCases(t, d, d.objs.MyelinFromPod, "from-pod", []progCase{
		{name: "to a ClusterIP: untouched", endpoints: seedB, in: tcp.build(), verdict: tcActOK, reason: "PASS_STACK"},
	})
	runCases(t, d, d.objs.MyelinToPod, "to-pod", []progCase{
		{name: "to a pod: untouched", in: tcp.build(), verdict: tcActOK, reason: "PASS_STACK"},
	})
}
