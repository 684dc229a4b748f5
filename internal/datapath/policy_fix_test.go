package datapath

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// policyStep is a program row run after change (if set) alters the maps as
// the agent would, keeping tracked connections unless change purges them.
type policyStep struct {
	policyRow
	change func(*Datapath) error
}

func runPolicySteps(t *testing.T, d *Datapath, steps []policyStep) {
	t.Helper()
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.seed != nil {
				if err := seedPolicy(d, *s.seed); err != nil {
					t.Fatal(err)
				}
			}
			if s.change != nil {
				if err := s.change(d); err != nil {
					t.Fatal(err)
				}
			}
			if s.endpoints == nil {
				s.endpoints = seedAB
			}
			if err := checkCase(d, s.prog, s.counterDir, s.progCase); err != nil {
				t.Error(err)
			}
		})
	}
}

// A connection tracked once is not a pass for ever: a TCP SYN (without
// ACK) is judged by the policy again after the policy was tightened or the
// peer's address went to another pod, and the agent's purge makes other
// protocols' next packets judged again too. Established segments stay one
// lookup until purged.
func TestPrivilegedBPFPolicyRetrack(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			toPod, fromPod := d.objs.MyelinToPod, d.objs.MyelinFromPod
			ingressB := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
				entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080), {Proto: protoUDP, Lo: 53, Hi: 53}}}}
			egressA := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress},
				entries: map[PolicyKey][]PolicyPort{egressOf(podA, idB): {tcpPort(8080)}}}
			syn := ipv4(protoTCP, podA, podBIP).withSrc(podA, 4001).withDst(podBIP, 8080)
			udp := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4002).withDst(podBIP, 53)
			row := func(name string, prog *ebpf.Program, dir string, p pkt, ok bool) policyStep {
				r := policyStep{policyRow: policyRow{prog: prog, counterDir: dir, progCase: progCase{name: name, in: p.build(),
					verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}}
				if ok {
					r.verdict, r.reason = tcActOK, "PASS_STACK"
				}
				if prog == fromPod {
					r.ctx = ctxPodA
					if ok && routing == HostRoutingBPF {
						r.verdict, r.out, r.reason = tcActRedirect, delivered(p), "FORWARDED"
					}
				}
				return r
			}
			seeded := func(st *policyState, r policyStep) policyStep { r.seed = st; return r }
			changed := func(f func(*Datapath) error, r policyStep) policyStep { r.change = f; return r }
			tighten := func(k PolicyKey) func(*Datapath) error {
				return func(d *Datapath) error { return d.DeletePolicy(k) }
			}
			reuse := func(d *Datapath) error { // A's address now belongs to a pod of another identity
				return d.SetIPCache(netip.MustParsePrefix(podA+"/32"), 105)
			}
			purge := func(p PolicyCTPurge, before func(*Datapath) error) func(*Datapath) error {
				return func(d *Datapath) error {
					if err := before(d); err != nil {
						return err
					}
					_, err := d.PurgePolicyCT(p)
					return err
				}
			}
			steps := []policyStep{
				seeded(ingressB, row("SYN A→B:8080 allowed and tracked", toPod, "to-pod", syn, true)),
				changed(tighten(ingressOf(podBIP, idA)), row("policy tightened: the same SYN again is denied", toPod, "to-pod", syn, false)),
				row("an established segment still passes its tracked entry (the agent purges it)", toPod, "to-pod", syn.withTCPFlags(0x10), true),
				seeded(ingressB, row("SYN A→B:8080 tracked again", toPod, "to-pod", syn, true)),
				changed(reuse, row("A's address reused by another pod: its SYN on the old tuple is denied", toPod, "to-pod", syn, false)),
				seeded(egressA, row("A's egress SYN to B:8080 allowed and tracked", fromPod, "from-pod", syn, true)),
				changed(tighten(egressOf(podA, idB)), row("A's egress tightened: the same SYN is denied", fromPod, "from-pod", syn, false)),
				seeded(ingressB, row("UDP A→B:53 allowed and tracked", toPod, "to-pod", udp, true)),
				changed(purge(PolicyCTPurge{Endpoints: map[netip.Addr]bool{mustAddr(podBIP): true}}, tighten(ingressOf(podBIP, idA))),
					row("B's policy tightened and purged: UDP on the tracked tuple is denied", toPod, "to-pod", udp, false)),
				seeded(ingressB, row("UDP A→B:53 tracked again", toPod, "to-pod", udp, true)),
				changed(purge(PolicyCTPurge{Peers: map[netip.Addr]bool{mustAddr(podA): true}}, reuse),
					row("A's /32 changed identity and purged: UDP on the tracked tuple is denied", toPod, "to-pod", udp, false)),
				seeded(ingressB, row("UDP from A tracked once more", toPod, "to-pod", udp, true)),
				changed(purge(PolicyCTPurge{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}}, reuse),
					row("a prefix holding A changed and purged: UDP is denied", toPod, "to-pod", udp, false)),
			}
			runPolicySteps(t, d, steps)
		})
	}
}

// Only the host's own stack may use the node-IP exemption (kubelet probes):
// the node's address arriving from the uplink or out of the tunnel is
// dropped as spoofed before it reaches a pod, and a packet the stack
// forwards into a pod (ingress_ifindex set) with that source is judged by
// the policy. The node's other addresses (myelin_host_addrs) likewise.
func TestPrivilegedBPFPolicyNodeIPExemption(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			isolated := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
				entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
			probe := ipv4(protoTCP, nodeIP, podBIP).withSrc(nodeIP, 5001).withDst(podBIP, 9999)
			fromUplink := &skbCtx{IngressIfindex: 2}
			rows := []policyRow{
				{seed: isolated, prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
					name: "kubelet probe: sent by the host (ingress_ifindex 0) passes", in: probe.build(), verdict: tcActOK, reason: "PASS_STACK"}},
				{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
					name: "node IP forwarded by the stack from a device: judged by the policy", in: probe.withSrc(nodeIP, 5002).build(),
					ctx: fromUplink, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
				{prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
					name: "node IP arriving on the uplink: spoofed", in: probe.withSrc(nodeIP, 5003).build(),
					ctx: fromUplink, verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
				{prog: d.objs.MyelinFromOverlay, counterDir: "from-overlay", progCase: progCase{
					name: "node IP out of the tunnel: spoofed", in: probe.withSrc(nodeIP, 5004).build(),
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
				// The hairpin address is a pod's own hairpin client to its server (lib/ct.h).
				{prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
					name: "hairpin address arriving on the uplink: spoofed", in: probe.withSrc("169.254.42.1", 5005).build(),
					ctx: fromUplink, verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
				{prog: d.objs.MyelinFromOverlay, counterDir: "from-overlay", progCase: progCase{
					name: "hairpin address out of the tunnel: spoofed", in: probe.withSrc("169.254.42.1", 5006).build(),
					verdict: tcActShot, reason: "DROP_SPOOFED_SOURCE"}},
				{prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: progCase{
					name: "another node's address on the uplink: not spoofed, B's policy denies it",
					in:   ipv4(protoTCP, "192.168.0.12", podBIP).withDst(podBIP, 9999).build(),
					ctx:  fromUplink, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
			}
			if routing == HostRoutingLegacy { // the stack delivers: myelin_to_pod judges it
				last := &rows[len(rows)-1]
				last.verdict, last.reason = tcActOK, "PASS_STACK"
			} else {
				rows[len(rows)-1].counterDir = "to-pod"
			}
			runPolicyRows(t, d, rows)

			hostAddressExemption(t, d, routing, fromUplink, probe)
		})
	}
}

// hostAddressExemption: the node's other addresses (a global address on lo, a
// second NIC) are exempt like node_ip once the agent lists them, only while it
// does, and what that exemption tracked passes only what the host sends.
// TestPrivilegedBPFPolicyNodeIPExemption's pod B is isolated for ingress.
func hostAddressExemption(t *testing.T, d *Datapath, routing HostRouting, fromUplink *skbCtx, probe pkt) {
	t.Helper()
	const other = "192.0.2.77"
	if err := d.SetHostAddresses([]netip.Addr{mustAddr(other), mustAddr(nodeIP)}); err != nil {
		t.Fatal(err)
	}
	fromOther := ipv4(protoTCP, other, podBIP).withDst(podBIP, 9999)
	runPolicyRows(t, d, []policyRow{
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "another host address, sent by the host: passes", in: fromOther.withSrc(other, 6001).build(),
			verdict: tcActOK, reason: "PASS_STACK"}},
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "another host address forwarded by the stack from a device: judged by the policy",
			in:   fromOther.withSrc(other, 6002).build(), ctx: fromUplink, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name:    "an address the host does not have, sent by the host: judged by the policy",
			in:      ipv4(protoTCP, "198.51.100.9", podBIP).withSrc("198.51.100.9", 6003).withDst(podBIP, 9999).build(),
			verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
	})
	// What the exemption tracked passes only what the host sends: the
	// same address may be another machine's too (an anycast VIP on
	// several nodes' lo, an address moved away since).
	hostFlow := ipv4(protoUDP, other, podBIP).withSrc(other, 7001).withDst(podBIP, 9999)
	riding := policyRow{prog: d.objs.MyelinFromNetdev, counterDir: "to-pod", progCase: progCase{
		name: "the tracked tuple arriving on the uplink: judged by the policy", in: hostFlow.build(),
		ctx: fromUplink, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}
	if routing == HostRoutingLegacy { // the stack delivers it: myelin_to_pod judges it
		riding.prog = d.objs.MyelinToPod
	}
	runPolicyRows(t, d, []policyRow{
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "a datagram the host sends from the other address: passes, tracked", in: hostFlow.build(),
			verdict: tcActOK, reason: "PASS_STACK"}},
		riding,
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "the host's next datagram on it: passes", in: hostFlow.build(), verdict: tcActOK, reason: "PASS_STACK"}},
	})
	// Nor do errors about it from elsewhere: no router sits between the
	// node and its pods.
	bReply := ipv4(protoUDP, podBIP, other).withSrc(podBIP, 9999).withDst(other, 7001)
	fromRouter := ipv4(protoICMP, "203.0.113.1", podBIP).withICMPError(3, 4, 1400, quote(bReply.withTTL(63)))
	routerRow := policyRow{prog: d.objs.MyelinFromNetdev, counterDir: "to-pod", progCase: progCase{
		name: "an error about it from a router on the uplink: judged as ICMP", in: fromRouter.build(),
		ctx: fromUplink, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}
	if routing == HostRoutingLegacy {
		routerRow.prog = d.objs.MyelinToPod
	}
	runPolicyRows(t, d, []policyRow{routerRow,
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "an error about it the host sends: passes",
			in:   ipv4(protoICMP, other, podBIP).withICMPError(3, 3, 0, quote(bReply)).build(), verdict: tcActOK, reason: "PASS_STACK"}},
	})
	udp := 0
	for k, v := range policyCTEntries(d) {
		if k.Proto != protoUDP {
			continue
		}
		udp++
		if v.Ends&uint32(myelinPolicyCtEndsPOLICY_CT_HOST_PEER) == 0 {
			t.Errorf("the host's datagram tracked as %+v ends %#x, want HOST_PEER", k, v.Ends)
		}
	}
	if udp != 1 {
		t.Errorf("%d UDP entries tracked, want the host's datagram's", udp)
	}
	// Nor do later fragments of a datagram the host sent: the first
	// fragment's mark passes only the host's.
	hostFrag := ipv4(protoUDP, other, podBIP).withSrc(other, 7002).withDst(podBIP, 9999)
	hostFrag.payload = fragPayload
	fragFirst, fragLater := hostFrag.fragments(0x0500)
	fragRiding := riding
	fragRiding.name, fragRiding.in = "a later fragment of it arriving on the uplink: judged by the policy", fragLater
	runPolicyRows(t, d, []policyRow{
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "the first fragment of a datagram the host sends from the other address: passes",
			in:   fragFirst, verdict: tcActOK, reason: "PASS_STACK"}},
		fragRiding,
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "its later fragment the host sends: passes", in: fragLater, verdict: tcActOK, reason: "PASS_STACK"}},
	})
	if err := d.SetHostAddresses([]netip.Addr{mustAddr(nodeIP)}); err != nil {
		t.Fatal(err)
	}
	runPolicyRows(t, d, []policyRow{
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "the address gone from the node: judged by the policy", in: fromOther.withSrc(other, 6004).build(),
			verdict: tcActShot, reason: "DROP_POLICY_DENIED"}},
		{prog: d.objs.MyelinToPod, counterDir: "to-pod", progCase: progCase{
			name: "the node IP needs no entry", in: probe.withSrc(nodeIP, 6005).build(), verdict: tcActOK, reason: "PASS_STACK"}},
	})
}
