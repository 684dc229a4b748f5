package datapath

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// frontQuote is q (a quoted packet a backend got: client -> backend) as
// the client sent it: destination address and port back to the frontend's,
// the quoted IPv4 checksum recomputed, the quoted L4 checksum left alone.
func frontQuote(q []byte, front netip.Addr, port uint16) []byte {
	q = append([]byte(nil), q...)
	hlen := int(q[0]&0x0f) * 4
	copy(q[16:20], front.AsSlice())
	binary.BigEndian.PutUint16(q[hlen+2:], port)
	q[10], q[11] = 0, 0
	binary.BigEndian.PutUint16(q[10:], checksum(q[:hlen], 0))
	return q
}

// ICMP errors about the DNATed packets of Service flows, from the backend
// or from a router on the way, reach the client as errors about what it
// sent (the ClusterIP), with valid checksums, wherever they enter its pod.
func TestPrivilegedLBICMPErrors(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod, fromNetdev, toPod := d.objs.MyelinFromPod, d.objs.MyelinFromNetdev, d.objs.MyelinToPod
	both := &lbState{backends: lbBackends, services: map[Frontend]Service{
		feUDP: {ID: 3, Backends: []uint32{1}}, feTCP: {ID: 1, Backends: []uint32{2}},
	}}
	udp := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	tcp := ipv4(protoTCP, podA, vip).withDst(vip, 80)
	// The packets as the backends got them (one hop: TTL 63), quoted by their errors.
	udpQuote := quote(udp.withDst(podBIP, 8080).withTTL(63))
	tcpQuote := quote(tcp.withDst(remoteIP, 8080).withTTL(63))
	udpBack := frontQuote(udpQuote, mustAddr(vip), 53)
	tcpBack := frontQuote(tcpQuote, mustAddr(vip), 80)

	portUnreach := ipv4(protoICMP, podBIP, podA).withICMPError(3, 3, 0, udpQuote)
	portUnreachBack := ipv4(protoICMP, vip, podA).withICMPError(3, 3, 0, udpBack)
	fragNeeded := ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, tcpQuote)
	fragNeededBack := ipv4(protoICMP, router, podA).withICMPError(3, 4, 1400, tcpBack)
	timeExceeded := ipv4(protoICMP, router, podA).withICMPError(11, 0, 0, udpQuote)
	timeExceededBack := ipv4(protoICMP, router, podA).withICMPError(11, 0, 0, udpBack)
	noFlow := ipv4(protoICMP, podBIP, podA).withICMPError(3, 3, 0, quote(udp.withSrc(podA, 40999).withDst(podBIP, 8080)))
	// A's port unreachable about the reply it got from the ClusterIP (its
	// socket closed before the answer came) goes to the backend, about
	// the reply as the backend sent it.
	replyGot := ipv4(protoUDP, vip, podA).withSrc(vip, 53).withDst(podA, 40000).withTTL(63)
	clientErr := ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(replyGot))
	clientErrToB := ipv4(protoICMP, podA, podBIP).withICMPError(3, 3, 0,
		restoredQuote(quote(replyGot), mustAddr(podBIP), 8080))
	clientErrNoFlow := ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(replyGot.withDst(podA, 40999)))
	// B's TCP flow through the ClusterIP; A quotes B's reply: not A's flow to send on.
	bTCP := ipv4(protoTCP, podBIP, vip).withSrc(podBIP, 40000).withDst(vip, 80)
	bReplyGot := ipv4(protoTCP, vip, podBIP).withSrc(vip, 80).withDst(podBIP, 40000).withTTL(63)
	othersErr := ipv4(protoICMP, podA, vip).withICMPError(3, 3, 0, quote(bReplyGot))
	notToSource := ipv4(protoICMP, podBIP, "10.1.0.99").withICMPError(3, 3, 0, udpQuote)

	// Pod B sends its error on its veth; pod A gets pod B's veth fixture, so delivered() fits it.
	seedReply := map[string]EndpointInfo{podA: podB, podBIP: podB}
	cases := []lbCase{
		{seed: both, prog: fromPod, dir: "from-pod", progCase: progCase{name: "UDP to the ClusterIP: DNAT to pod B",
			endpoints: seedB, in: udp.build(), verdict: tcActRedirect, out: delivered(udp.withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "TCP to the ClusterIP: DNAT to the remote backend",
			in: tcp.build(), verdict: tcActOK, out: tcp.withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "the client's port unreachable about the ClusterIP's reply: to the backend",
			endpoints: seedB, in: clientErr.build(), verdict: tcActRedirect, out: delivered(clientErrToB), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "the client's error about a reply of no flow: untouched",
			endpoints: seedB, in: clientErrNoFlow.build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "B's TCP to the ClusterIP: DNAT to the remote backend",
			endpoints: seedB, in: fromPodB(bTCP).build(), verdict: tcActOK, out: fromPodB(bTCP.withDst(remoteIP, 8080)).build(), reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "an error about B's reply from A: not A's flow, untouched",
			endpoints: seedB, in: othersErr.build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "port unreachable from the local backend: from the ClusterIP",
			endpoints: seedReply, in: fromPodB(portUnreach).build(), verdict: tcActRedirect, out: delivered(portUnreachBack), reason: "FORWARDED"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "port unreachable delivered by the stack",
			in: portUnreach.build(), verdict: tcActOK, out: portUnreachBack.build(), reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "frag-needed from a router: the quote back to the ClusterIP",
			endpoints: seedA, in: fragNeeded.build(), verdict: tcActRedirect, out: delivered(fragNeededBack), reason: "FORWARDED"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "time exceeded from a router",
			in: timeExceeded.build(), verdict: tcActOK, out: timeExceededBack.build(), reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "error about no flow: untouched",
			in: noFlow.build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: toPod, dir: "to-pod", progCase: progCase{name: "error not addressed to the quoted source: untouched",
			in: notToSource.build(), verdict: tcActOK, reason: "PASS_STACK"}},
	}
	for _, p := range []pkt{portUnreachBack, fragNeededBack, timeExceededBack, clientErrToB} {
		if out := p.build(); !ipv4HeaderValid(out) || !l4ChecksumValid(out) || !ipv4HeaderValid(append(make([]byte, 14), p.payload...)) {
			t.Fatalf("fixture %x has bad checksums", out)
		}
	}
	runLBCases(t, d, cases)
}

// A reject over the CPU's rate is dropped and counted but not answered:
// the bucket is seeded with one token and a refill time in the future, so
// the second reject finds it empty whatever the time between them.
func TestPrivilegedLBRejectRateLimit(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	if err := seedLB(d, lbState{backends: lbBackends, services: map[Frontend]Service{feUDP: {ID: 2}}}); err != nil {
		t.Fatal(err)
	}
	// Both runs on one CPU: the buckets are per CPU.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	for cpu := range 1024 {
		if old.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)

	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	bucket := myelinIcmpRate{LastNs: uint64(MonotonicNow() + time.Hour), Tokens: 1}
	buckets := make([]myelinIcmpRate, n)
	for i := range buckets {
		buckets[i] = bucket
	}
	if err := d.objs.MyelinIcmpRate.Update(uint32(0), buckets, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	udp := ipv4(protoUDP, podA, vip).withDst(vip, 53)
	in := udp.build()
	for _, c := range []progCase{
		{name: "the token's reject is answered", endpoints: seedB, in: in, verdict: tcActRedirect, out: portUnreachable(in), reason: "DROP_SVC_NO_BACKEND"},
		{name: "the next one only dropped", endpoints: seedB, in: in, verdict: tcActShot, reason: "DROP_SVC_NO_BACKEND"},
		{name: "and the next", endpoints: seedB, in: in, verdict: tcActShot, reason: "DROP_SVC_NO_BACKEND"},
	} {
		if err := checkCase(d, d.objs.MyelinFromPod, "from-pod", c); err != nil {
			t.Error(err)
		}
	}
	if got, err := d.ICMPRejectsSuppressed(); err != nil || got != 2 {
		t.Errorf("ICMPRejectsSuppressed = %d, %v; want 2", got, err)
	}
}

// ICMP errors about NodePort and hairpin flows: a local NodePort backend's
// error leaves from the NodePort, a remote backend's comes back through
// masquerade's and the Service's translation, and a hairpin client gets
// its own error from the ClusterIP.
func TestPrivilegedLBICMPErrorsNodePortHairpin(t *testing.T) {
	requirePrivileged(t)
	d := loadLB(t, HostRoutingBPF, 0)
	fromPod, fromNetdev := d.objs.MyelinFromPod, d.objs.MyelinFromNetdev
	feUDPNodePort := Frontend{Addr: testNodeIP, Port: nodePort, Proto: protoUDP}
	npTo := func(id uint32) *lbState {
		return oneService(feUDPNodePort, Service{ID: 4, Flags: ServiceNodePort, Backends: []uint32{id}})
	}
	req := ipv4(protoUDP, extHost, nodeIP).withDst(nodeIP, nodePort)
	toLocal := req.withDst(podBIP, 8080)
	toRemote := req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080)
	// What the client sent, as the errors must quote it.
	clientQuote := func(q []byte) []byte {
		return frontQuote(restoredQuote(q, mustAddr(extHost), 40000), testNodeIP, nodePort)
	}
	// Pod B sends its error on its veth; handed to the stack, it keeps pod B's MACs.
	localErr := fromPodB(ipv4(protoICMP, podBIP, extHost).withICMPError(3, 3, 0, quote(toLocal.withTTL(63))))
	localBack := fromPodB(ipv4(protoICMP, nodeIP, extHost).withICMPError(3, 3, 0, clientQuote(quote(toLocal.withTTL(63)))))
	remoteErr := ipv4(protoICMP, remoteIP, nodeIP).withICMPError(3, 3, 0, quote(toRemote))
	remoteBack := ipv4(protoICMP, nodeIP, extHost).withICMPError(3, 3, 0, clientQuote(quote(toRemote)))
	// A router on the way to the remote backend: the error keeps its source.
	routerErr := ipv4(protoICMP, router, nodeIP).withICMPError(3, 4, 1400, quote(toRemote.withTTL(63)))
	routerBack := ipv4(protoICMP, router, extHost).withICMPError(3, 4, 1400, clientQuote(quote(toRemote.withTTL(63))))
	noNPFlow := ipv4(protoICMP, remoteIP, nodeIP).withICMPError(3, 3, 0, quote(toRemote.withDst(remoteIP, 9090)))

	hp := fromPodB(ipv4(protoUDP, podBIP, vip).withDst(vip, 53))
	hpQuote := quote(hp.withSrc(hairpin, 40000).withDst(podBIP, 8080).withTTL(63))
	hpErr := fromPodB(ipv4(protoICMP, podBIP, hairpin).withICMPError(3, 3, 0, hpQuote))
	hpBack := ipv4(protoICMP, vip, podBIP).withICMPError(3, 3, 0,
		frontQuote(restoredQuote(hpQuote, mustAddr(podBIP), 40000), mustAddr(vip), 53))

	// Without a test-run context the FIB lookup fails: NodePort traffic goes to the stack.
	cases := []lbCase{
		{seed: npTo(1), prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "UDP NodePort to the local backend",
			endpoints: seedB, in: req.build(), verdict: tcActRedirect, out: delivered(toLocal), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "its port unreachable: from the NodePort",
			endpoints: seedB, in: localErr.build(), verdict: tcActOK, out: localBack.build(), reason: "PASS_STACK"}},
		{seed: npTo(2), prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "UDP NodePort to the remote backend",
			endpoints: seedB, in: req.build(), verdict: tcActOK, out: toRemote.build(), reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "frag-needed from a router on the way: back to the client, its source kept",
			endpoints: seedB, in: routerErr.build(), verdict: tcActOK, out: routerBack.build(), reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "error about no NodePort flow: the node's own, untouched",
			endpoints: seedB, in: noNPFlow.build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: fromNetdev, dir: "from-netdev", progCase: progCase{name: "its port unreachable: back to the client from the NodePort",
			endpoints: seedB, in: remoteErr.build(), verdict: tcActOK, out: remoteBack.build(), reason: "PASS_STACK"}},
		{seed: oneService(feUDP, Service{ID: 3, Backends: []uint32{1}}), prog: fromPod, dir: "from-pod", progCase: progCase{name: "hairpin UDP",
			endpoints: seedB, in: hp.build(), verdict: tcActRedirect, out: delivered(hp.withSrc(hairpin, 40000).withDst(podBIP, 8080)), reason: "FORWARDED"}},
		{prog: fromPod, dir: "from-pod", progCase: progCase{name: "hairpin port unreachable: to the pod from the ClusterIP",
			endpoints: seedB, in: hpErr.build(), verdict: tcActRedirect, out: delivered(hpBack), reason: "FORWARDED"}},
	}
	for _, p := range []pkt{localBack, remoteBack, routerBack, hpBack} {
		if out := p.build(); !ipv4HeaderValid(out) || !l4ChecksumValid(out) {
			t.Fatalf("fixture %x has bad checksums", out)
		}
	}
	runLBCases(t, d, cases)
}
