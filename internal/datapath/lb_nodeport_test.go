package datapath

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"testing"
)

// NodePort without a FIB (the test-run's FIB lookup fails and hands the
// translated packet to the stack): a local backend keeps the client's
// address, a remote one gets the node IP as the source with NAT entries, and
// the replies of both get the NodePort frontend back.
func TestPrivilegedLBNodePort(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			runLBCases(t, d, nodePortCases(d, routing))
		})
	}
}

func nodePortCases(d *Datapath, routing HostRouting) []lbCase {
	req := ipv4(protoTCP, extHost, nodeIP).withDst(nodeIP, nodePort)
	toLocal := req.withDst(podBIP, 8080)
	localOut, localVerdict, localReason := delivered(toLocal), uint32(tcActRedirect), "FORWARDED"
	if routing == HostRoutingLegacy {
		localOut, localVerdict, localReason = toLocal.build(), tcActOK, "PASS_STACK"
	}
	hostReply := ipv4(protoTCP, nodeIP, extHost).withSrc(nodeIP, hostPort).withDst(extHost, 40000).withTCPFlags(0x12)
	localReply := fromPodB(ipv4(protoTCP, podBIP, extHost).withSrc(podBIP, 8080).withDst(extHost, 40000).withTCPFlags(0x12))
	remoteReply := ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 8080).withDst(nodeIP, testNATPort).withTCPFlags(0x12)
	nat := func(d *Datapath) error {
		// Embryonic, in the NodePort table; nothing in myelin_snat or myelin_lb_ct.
		if err := checkNodePortFlows(d, []NodePortFlow{npTestFlow(extHost, 40000, remoteIP, 2, false, "tcp-syn")}); err != nil {
			return err
		}
		if err := checkNAT(d, []NATEntry{}); err != nil {
			return err
		}
		return checkEmpty(d.objs.MyelinLbCt)
	}
	return []lbCase{
		{seed: oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{1}}), prog: d.objs.MyelinFromNetdev, dir: "from-netdev",
			progCase: progCase{name: "local backend: DNAT only", endpoints: seedB, in: req.build(), verdict: localVerdict, out: localOut, reason: localReason}},
		{prog: d.objs.MyelinFromPod, dir: "from-pod", progCase: progCase{name: "local backend's reply: source back to the NodePort",
			endpoints: seedB, in: localReply.build(), verdict: tcActOK, out: localReply.withSrc(nodeIP, nodePort).build(), reason: "PASS_STACK"}},
		{seed: oneService(feNodePort, Service{ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}}), prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: nat,
			progCase: progCase{name: "remote backend: DNAT and SNAT to the node IP", endpoints: seedB, in: req.build(), verdict: tcActOK,
				out: req.withSrc(nodeIP, testNATPort).withDst(remoteIP, 8080).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", progCase: progCase{name: "remote backend's reply: back to the client from the NodePort",
			endpoints: seedB, in: remoteReply.build(), verdict: tcActOK, out: remoteReply.withSrc(nodeIP, nodePort).withDst(extHost, 40000).build(), reason: "PASS_STACK"}},
		{seed: hostBackendService(), prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: noNodePortSNAT,
			progCase: progCase{name: "backend on the node itself (hostNetwork): DNAT only, the client stays", endpoints: seedB, in: req.build(),
				verdict: tcActOK, out: req.withDst(nodeIP, hostPort).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinToNetdev, dir: "to-netdev", progCase: progCase{name: "the host's reply leaving the uplink: source back to the NodePort",
			in: hostReply.build(), verdict: tcActOK, out: hostReply.withSrc(nodeIP, nodePort).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinToNetdev, dir: "to-netdev", progCase: progCase{name: "the host's other packets: untouched",
			in: hostReply.withDst(extHost, 40001).build(), verdict: tcActOK, out: hostReply.withDst(extHost, 40001).build(), reason: "PASS_STACK"}},
		{prog: d.objs.MyelinFromNetdev, dir: "from-netdev", then: noNodePortSNAT, progCase: progCase{
			name: "backend on the node itself, a pod of another node as the client: DNAT only", endpoints: seedB,
			in: req.withSrc(remoteIP, 40002).build(), verdict: tcActOK, out: req.withSrc(remoteIP, 40002).withDst(nodeIP, hostPort).build(), reason: "PASS_STACK"}},
		{seed: oneService(feTCP, Service{ID: 1, Backends: []uint32{1}}), prog: d.objs.MyelinFromNetdev, dir: "from-netdev",
			progCase: progCase{name: "ClusterIP from outside: not served", endpoints: seedB, in: ipv4(protoTCP, extHost, vip).withDst(vip, 80).build(), verdict: tcActOK, reason: "PASS_STACK"}},
		{seed: oneService(Frontend{Addr: testNodeIP, Port: 80, Proto: protoTCP}, Service{ID: 1, Backends: []uint32{1}}), prog: d.objs.MyelinFromNetdev, dir: "from-netdev",
			progCase: progCase{name: "node IP frontend without the NodePort flag: not served", endpoints: seedB, in: req.withDst(nodeIP, 80).build(), verdict: tcActOK, reason: "PASS_STACK"}},
	}
}

// hostPort is the port of backend 3, a hostNetwork server on the node itself.
const hostPort = 8083

// hostBackendService is a NodePort whose one backend (3) is the node's own address.
func hostBackendService() *lbState {
	backends := maps.Clone(lbBackends)
	backends[3] = Backend{Addr: testNodeIP, Port: hostPort}
	return &lbState{backends: backends, services: map[Frontend]Service{feNodePort: {ID: 1, Flags: ServiceNodePort, Backends: []uint32{3}}}}
}

// noNodePortSNAT checks that a flow took no NodePort SNAT entry.
func noNodePortSNAT(d *Datapath) error {
	return errors.Join(checkNodePortFlows(d, []NodePortFlow{}), checkNAT(d, []NATEntry{}))
}

// NodePort against a real FIB, in both host routing modes: translated
// NodePort traffic (source: the node IP) is always forwarded by BPF, never
// handed to the stack, which would drop it as a martian.
func TestPrivilegedLBNodePortFIB(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			inNetns(t, func(string) {
				if err := nodePortFIB(d, routing); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// nodePortFIB runs the NodePort FIB rows in the current netns.
func nodePortFIB(d *Datapath, routing HostRouting) error {
	lab, err := setupFIBLab()
	if err != nil {
		return err
	}
	if err := setForwarding(true); err != nil {
		return err
	}
	// Client and remote backend are behind the lab's gateway (10.200.0.0/24).
	const client, backend = "10.200.0.99", "10.200.0.5"
	st := lbState{
		backends: map[uint32]Backend{1: backendB, 2: {Addr: mustAddr(backend), Port: 8080}},
		services: map[Frontend]Service{
			feNodePort: {ID: 1, Flags: ServiceNodePort, Backends: []uint32{2}},
			{Addr: testNodeIP, Port: nodePort + 1, Proto: protoTCP}: {ID: 2, Flags: ServiceNodePort, Backends: []uint32{1}},
		},
	}
	if err := seedLB(d, st); err != nil {
		return err
	}
	ctx := &skbCtx{IngressIfindex: uint32(lab.in), Ifindex: uint32(lab.in)}
	decTTL := func(p pkt) []byte { return p.withTTL(p.ttl - 1).build() }
	req := ipv4(protoTCP, client, nodeIP).withDst(nodeIP, nodePort)
	reply := ipv4(protoTCP, backend, nodeIP).withSrc(backend, 8080).withDst(nodeIP, testNATPort).withTCPFlags(0x12)
	local := ipv4(protoTCP, client, nodeIP).withSrc(client, 40001).withDst(nodeIP, nodePort+1)
	localOut, localVerdict, localReason := delivered(local.withDst(podBIP, 8080)), uint32(tcActRedirect), "FORWARDED"
	if routing == HostRoutingLegacy {
		localOut, localVerdict, localReason = local.withDst(podBIP, 8080).build(), tcActOK, "PASS_STACK"
	}
	localReply := fromPodB(ipv4(protoTCP, podBIP, client).withSrc(podBIP, 8080).withDst(client, 40001).withTCPFlags(0x12))
	// Pod B's veth is the lab's ingress device, so its reply passes source validation.
	podBHere := podB
	podBHere.IfIndex = lab.in
	seed := map[string]EndpointInfo{podBIP: podBHere}
	cases := []struct {
		c    progCase
		from string
	}{
		{progCase{name: "remote backend: forwarded from the node IP", in: req.build(), verdict: tcActRedirect,
			out: decTTL(req.withSrc(nodeIP, testNATPort).withDst(backend, 8080)), reason: "FORWARDED"}, "from-netdev"},
		{progCase{name: "its reply: forwarded to the client from the NodePort", in: reply.build(), verdict: tcActRedirect,
			out: decTTL(reply.withSrc(nodeIP, nodePort).withDst(client, 40000)), reason: "FORWARDED"}, "from-netdev"},
		{progCase{name: "local backend: delivered", in: local.build(), verdict: localVerdict, out: localOut, reason: localReason}, "from-netdev"},
		{progCase{name: "its reply: forwarded to the client from the NodePort", in: localReply.build(), verdict: tcActRedirect,
			out: decTTL(localReply.withSrc(nodeIP, nodePort+1)), reason: "FORWARDED"}, "from-pod"},
	}
	for _, c := range cases {
		c.c.endpoints, c.c.ctx = seed, ctx
		prog := d.objs.MyelinFromNetdev
		if c.from == "from-pod" {
			prog = d.objs.MyelinFromPod
		}
		if err := checkCase(d, prog, c.from, c.c); err != nil {
			return fmt.Errorf("%v: %w", routing, err)
		}
	}
	return nil
}

// A NodePort served by the node's own host, for a pod of another node: in tunnel mode
// the host's reply leaves through the overlay device, whose egress program gives it
// the NodePort back as its source before encapsulation; the node's other packets and
// pods' pass untouched.
func TestPrivilegedLBNodePortHostReplyOverlay(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadLB(t, routing, 0)
			req := ipv4(protoTCP, remoteIP, nodeIP).withSrc(remoteIP, 40002).withDst(nodeIP, nodePort)
			reply := ipv4(protoTCP, nodeIP, remoteIP).withSrc(nodeIP, hostPort).withDst(remoteIP, 40002).withTCPFlags(0x12)
			runLBCases(t, d, []lbCase{{seed: hostBackendService(), prog: d.objs.MyelinFromNetdev, dir: "from-netdev", progCase: progCase{
				name: "request from a pod of another node: DNAT only", endpoints: seedB, in: req.build(), verdict: tcActOK,
				out: req.withDst(nodeIP, hostPort).build(), reason: "PASS_STACK"}}})
			for _, c := range []struct {
				name    string
				in, out []byte
				ctx     *skbCtx
			}{
				{"the host's reply: source back to the NodePort", reply.build(), reply.withSrc(nodeIP, nodePort).build(), nil},
				{"the host's other packet: untouched", reply.withDst(remoteIP, 40003).build(), reply.withDst(remoteIP, 40003).build(), nil},
				{"a pod's packet: untouched", ipv4(protoTCP, podBIP, remoteIP).withSrc(podBIP, hostPort).withDst(remoteIP, 40002).build(),
					ipv4(protoTCP, podBIP, remoteIP).withSrc(podBIP, hostPort).withDst(remoteIP, 40002).build(), ctxForwarded},
			} {
				ret, out, err := runPacket(d.objs.MyelinToOverlay, c.in, c.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ret != tcActOK || !bytes.Equal(out, c.out) {
					t.Errorf("to-overlay, %s: verdict %d, packet\n got %x\nwant %x", c.name, ret, out, c.out)
				}
			}
		})
	}
}
