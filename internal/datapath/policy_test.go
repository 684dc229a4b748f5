package datapath

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

// NetworkPolicy fixtures: pod A (10.1.0.10) and pod B (10.1.0.20) are local
// endpoints, 10.2.0.33 a pod of another node; identities as the agent would
// give them, with a policy CIDR 203.0.113.0/24 and its except
// 203.0.113.10/32.
const (
	idA, idB, idRemote, idCIDR, idExcept = 100, 101, 102, 103, 104
	protoSCTP                            = 132
)

var policyIPCache = map[string]uint32{
	podA + "/32": idA, podBIP + "/32": idB, remoteIP + "/32": idRemote,
	"203.0.113.0/24": idCIDR, "203.0.113.10/32": idExcept,
}

// policyState is what the agent wrote: isolation flags and allow entries.
type policyState struct {
	flags   map[string]PolicyFlags
	entries map[PolicyKey][]PolicyPort
}

// seedPolicy makes the policy maps hold exactly st (plus policyIPCache),
// with no tracked connections.
func seedPolicy(d *Datapath, st policyState) error {
	if err := seedPolicyKeepingCT(d, st); err != nil {
		return err
	}
	_, err := clearPolicyCT(d)
	return err
}

// seedPolicyKeepingCT is seedPolicy leaving the tracked connections as they are.
func seedPolicyKeepingCT(d *Datapath, st policyState) error {
	for p, id := range policyIPCache {
		if err := d.SetIPCache(netip.MustParsePrefix(p), id); err != nil {
			return err
		}
	}
	old, err := d.Policies()
	if err != nil {
		return err
	}
	for k := range old {
		if err := d.DeletePolicy(k); err != nil {
			return err
		}
	}
	for k, ports := range st.entries {
		if err := d.SetPolicy(k, ports); err != nil {
			return err
		}
	}
	flags, err := d.PolicyFlagsAll()
	if err != nil {
		return err
	}
	for ip := range flags {
		if err := d.SetPolicyFlags(ip, 0); err != nil {
			return err
		}
	}
	for ip, f := range st.flags {
		if err := d.SetPolicyFlags(mustAddr(ip), f); err != nil {
			return err
		}
	}
	return nil
}

// policyRow is a program row run after the policy state is reset to seed
// (nil: the previous row's state is kept, tracked connections included);
// counterDir is the direction the reason is counted under.
type policyRow struct {
	progCase
	prog       *ebpf.Program
	counterDir string
	seed       *policyState
}

func runPolicyRows(t *testing.T, d *Datapath, rows []policyRow) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if r.seed != nil {
				if err := seedPolicy(d, *r.seed); err != nil {
					t.Fatal(err)
				}
			}
			if r.endpoints == nil {
				r.endpoints = seedAB
			}
			if err := checkCase(d, r.prog, r.counterDir, r.progCase); err != nil {
				t.Error(err)
			}
		})
	}
}

func ingressOf(ip string, id uint32) PolicyKey {
	return PolicyKey{Endpoint: mustAddr(ip), Identity: id}
}
func egressOf(ip string, id uint32) PolicyKey {
	return PolicyKey{Endpoint: mustAddr(ip), Identity: id, Egress: true}
}

func tcpPort(p uint16) PolicyPort { return PolicyPort{Proto: protoTCP, Lo: p, Hi: p} }

// sctp is an SCTP packet (common header: ports, tag, checksum) from src:sport to dst:dport.
func sctp(src string, sport uint16, dst string, dport uint16) pkt {
	p := ipv4(protoSCTP, src, dst)
	hdr := make([]byte, 12)
	binary.BigEndian.PutUint16(hdr[0:], sport)
	binary.BigEndian.PutUint16(hdr[2:], dport)
	p.payload = hdr
	return p
}

// Ingress of pod B as the stack delivers it (myelin_to_pod, both host
// routing modes): selectors by identity, ports, endPort ranges, protocols,
// any-peer entries, ipBlock with except, world, the node's own traffic,
// fail closed when incomplete.
func TestPrivilegedBPFPolicyIngress(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			toPod := d.objs.MyelinToPod
			isolated := map[string]PolicyFlags{podBIP: PolicyIngress}
			st := &policyState{flags: isolated, entries: map[PolicyKey][]PolicyPort{
				ingressOf(podBIP, idA):      {tcpPort(8080), {Proto: protoUDP, Lo: 8000, Hi: 8100}, {Proto: protoSCTP, Lo: 9000, Hi: 9000}},
				ingressOf(podBIP, idCIDR):   {tcpPort(80)},
				ingressOf(podBIP, idRemote): {{}},
			}}
			pass := func(name string, p pkt) policyRow {
				return policyRow{prog: toPod, counterDir: "to-pod", progCase: progCase{name: name, in: p.build(), verdict: tcActOK, reason: "PASS_STACK"}}
			}
			deny := func(name string, p pkt, reason string) policyRow {
				return policyRow{prog: toPod, counterDir: "to-pod", progCase: progCase{name: name, in: p.build(), verdict: tcActShot, reason: reason}}
			}
			fromA := func(proto uint8, sport, dport uint16) pkt {
				return ipv4(proto, podA, podBIP).withSrc(podA, sport).withDst(podBIP, dport)
			}
			rows := []policyRow{
				{seed: &policyState{}, prog: toPod, counterDir: "to-pod", progCase: progCase{name: "not isolated: anything passes",
					in: fromA(protoTCP, 1000, 9999).build(), verdict: tcActOK, reason: "PASS_STACK"}},
				func() policyRow {
					r := pass("allowed peer and port", fromA(protoTCP, 1001, 8080))
					r.seed = st
					return r
				}(),
				deny("allowed peer, other port", fromA(protoTCP, 1002, 8081), "DROP_POLICY_DENIED"),
				deny("allowed peer and port number, other protocol", sctp(podA, 1003, podBIP, 8080), "DROP_POLICY_DENIED"),
				pass("endPort range: low end", fromA(protoUDP, 1004, 8000)),
				pass("endPort range: high end", fromA(protoUDP, 1005, 8100)),
				deny("endPort range: above", fromA(protoUDP, 1006, 8101), "DROP_POLICY_DENIED"),
				pass("SCTP port", sctp(podA, 1007, podBIP, 9000)),
				deny("SCTP other port", sctp(podA, 1008, podBIP, 9001), "DROP_POLICY_DENIED"),
				deny("ICMP from a peer allowed on ports only", ipv4(protoICMP, podA, podBIP), "DROP_POLICY_DENIED"),
				pass("all protocols of a peer: ICMP", ipv4(protoICMP, remoteIP, podBIP)),
				pass("all protocols of a peer: UDP", ipv4(protoUDP, remoteIP, podBIP).withDst(podBIP, 5)),
				pass("ipBlock: address in the CIDR", ipv4(protoTCP, "203.0.113.5", podBIP).withDst(podBIP, 80)),
				deny("ipBlock: address in the except", ipv4(protoTCP, "203.0.113.10", podBIP).withDst(podBIP, 80), "DROP_POLICY_DENIED"),
				deny("world: not allowed", ipv4(protoTCP, "198.51.100.1", podBIP).withDst(podBIP, 80), "DROP_POLICY_DENIED"),
				pass("the node's own address (kubelet probes)", ipv4(protoTCP, nodeIP, podBIP).withDst(podBIP, 9999)),
				pass("a packet to another pod is not B's business", ipv4(protoTCP, "198.51.100.1", podA).withDst(podA, 1)),
				{seed: &policyState{flags: isolated, entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, IdentityAny): {tcpPort(443)}}},
					prog: toPod, counterDir: "to-pod", progCase: progCase{name: "any peer: the world on the port",
						in: ipv4(protoTCP, "198.51.100.1", podBIP).withDst(podBIP, 443).build(), verdict: tcActOK, reason: "PASS_STACK"}},
				deny("any peer: another port", ipv4(protoTCP, "198.51.100.1", podBIP).withDst(podBIP, 444), "DROP_POLICY_DENIED"),
				{seed: &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyIngressIncomplete}},
					prog: toPod, counterDir: "to-pod", progCase: progCase{name: "incomplete: a miss fails closed with its own reason",
						in: fromA(protoTCP, 1009, 8080).build(), verdict: tcActShot, reason: "DROP_POLICY_MAP_FULL"}},
				{seed: &policyState{flags: map[string]PolicyFlags{podBIP: PolicyEgress}},
					prog: toPod, counterDir: "to-pod", progCase: progCase{name: "egress isolated only: ingress open",
						in: fromA(protoTCP, 1010, 8080).build(), verdict: tcActOK, reason: "PASS_STACK"}},
			}
			runPolicyRows(t, d, rows)
		})
	}
}

// Egress of pod A in myelin_from_pod, and the ingress check of pod B where
// BPF host routing delivers it (endpoint_deliver, counted under to-pod).
func TestPrivilegedBPFPolicyEgressAndDelivery(t *testing.T) {
	requirePrivileged(t)
	for _, routing := range []HostRouting{HostRoutingBPF, HostRoutingLegacy} {
		t.Run(routing.String(), func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: routing, NodeIP: testNodeIP})
			fromPod := d.objs.MyelinFromPod
			toB := func(sport, dport uint16) pkt {
				return ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, dport)
			}
			ok := func(name string, p pkt) policyRow {
				r := policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{name: name, in: p.build(), ctx: ctxPodA,
					verdict: tcActRedirect, out: delivered(p), reason: "FORWARDED"}}
				if routing == HostRoutingLegacy {
					r.verdict, r.out, r.reason = tcActOK, nil, "PASS_STACK"
				}
				return r
			}
			drop := func(name, dir string, p pkt) policyRow {
				return policyRow{prog: fromPod, counterDir: dir, progCase: progCase{name: name, in: p.build(), ctx: ctxPodA,
					verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}
			}
			egress := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress},
				entries: map[PolicyKey][]PolicyPort{egressOf(podA, idB): {tcpPort(8080)}}}
			rows := []policyRow{
				func() policyRow { r := ok("egress allowed to B:8080", toB(2001, 8080)); r.seed = egress; return r }(),
				drop("egress to B:8081 denied at A's egress", "from-pod", toB(2002, 8081)),
				drop("egress to a remote pod denied", "from-pod", ipv4(protoTCP, podA, remoteIP).withSrc(podA, 2003)),
			}
			if routing == HostRoutingBPF {
				ingress := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
					entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
				rows = append(rows,
					func() policyRow { r := ok("B's ingress allows A:8080", toB(2004, 8080)); r.seed = ingress; return r }(),
					drop("B's ingress denies A:8081 where BPF delivers", "to-pod", toB(2005, 8081)))
			}
			runPolicyRows(t, d, rows)
		})
	}
}

// Statefulness: replies of an allowed connection pass an isolated
// direction; a new connection the other way does not.
func TestPrivilegedBPFPolicyReplies(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	// B is isolated both ways and allows A in on TCP 8080; A is isolated
	// for ingress only and allows nothing in.
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyEgress, podA: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	req := ipv4(protoTCP, podA, podBIP).withSrc(podA, 3001).withDst(podBIP, 8080)
	reply := ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 3001).withTCPFlags(0x12).withMACs(podBMAC, hostBMAC)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	pass := func(name string, prog *ebpf.Program, dir string, p pkt, ctx *skbCtx) policyRow {
		return policyRow{prog: prog, counterDir: dir, progCase: progCase{name: name, in: p.build(), ctx: ctx, verdict: tcActOK, reason: "PASS_STACK"}}
	}
	deny := func(name string, prog *ebpf.Program, dir string, p pkt, ctx *skbCtx) policyRow {
		return policyRow{prog: prog, counterDir: dir, progCase: progCase{name: name, in: p.build(), ctx: ctx, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}
	}
	rows := []policyRow{
		func() policyRow {
			r := deny("before any request, B's answer is a new connection: B's egress denies", fromPod, "from-pod", reply, ctxB)
			r.seed = st
			return r
		}(),
		pass("A's request leaves A (A's egress open: tracked)", fromPod, "from-pod", req, ctxPodA),
		pass("A's request enters B (allowed)", toPod, "to-pod", req, nil),
		pass("B's reply leaves B (egress isolated, a reply)", fromPod, "from-pod", reply, ctxB),
		pass("B's reply enters A (ingress isolated, a reply)", toPod, "to-pod", reply, nil),
		pass("A's next segment enters B (tracked)", toPod, "to-pod", req.withTCPFlags(0x10), nil),
		deny("B opens its own connection to A: B's egress denies", fromPod, "from-pod", reply.withSrc(podBIP, 8081), ctxB),
		deny("a stranger's packet to A's port: A's ingress denies", toPod, "to-pod",
			ipv4(protoTCP, remoteIP, podA).withSrc(remoteIP, 8080).withDst(podA, 3001), nil),
	}
	runPolicyRows(t, d, rows)
}

// A connection whose entry was evicted from myelin_policy_ct (docs/policy.md, "What
// eviction costs") is judged as new in each direction: the reply of a server that is
// egress-isolated is denied, never guessed to be a reply, until the client's next
// segment, still allowed in, tracks the connection again.
func TestPrivilegedBPFPolicyEvictedReply(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	st := isolatedB(tcpPort(8080))
	req, reply := abSegments(3002)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	evict := func(d *Datapath) error {
		n, err := clearPolicyCT(d)
		if err == nil && n == 0 {
			err = errors.New("no tracked connection to evict")
		}
		return err
	}
	first := verdictStep("A's segment enters B (allowed: tracked)", toPod, "to-pod", req, nil, true)
	first.seed = st
	evicted := verdictStep("after eviction, B's reply is judged by B's egress: denied", fromPod, "from-pod", reply, ctxB, false)
	evicted.change = evict
	runPolicySteps(t, d, []policyStep{
		first,
		verdictStep("B's reply leaves B (tracked)", fromPod, "from-pod", reply, ctxB, true),
		evicted,
		verdictStep("A's next segment enters B (still allowed: tracked again)", toPod, "to-pod", req, nil, true),
		verdictStep("B's reply leaves B again", fromPod, "from-pod", reply, ctxB, true),
	})
}
