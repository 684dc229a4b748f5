package datapath

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// A pod isolated in one direction for the first time had its connections of
// the other direction tracked by the agent (SeedPolicyCT): B, isolated for
// ingress, admits nothing from A, yet A's segments on the connection B opened
// to A:8080 reach B (after the purge of the apply that isolates B, which
// judges B's seeded end in the direction that stays open), and so do A's datagrams on a UDP flow B opened; B, isolated
// for egress, answers on the connection A opened to B:8080. What was not
// seeded stays judged: A's segment on another connection, and a SYN of A's
// on the seeded tuple itself (a new connection), are denied.
func TestPrivilegedBPFPolicySeededConnections(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP})
	fromPod := d.objs.MyelinFromPod
	ctxPodB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	toA := func(p pkt) []byte { return p.withMACs(podASender.HostMAC, podAMAC).withTTL(p.ttl - 1).build() }
	a, b := mustAddr(podA), mustAddr(podBIP)
	ingressB := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress}}
	egressB := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyEgress}}
	// seed seeds ends, then purges B's ends as the agent's apply that isolates
	// B does: judged again, in the direction their check accepted them, where
	// only B's open direction (egress: its own connections) allows.
	seed := func(egressOpen bool, ends ...PolicyCTEnd) func(*Datapath) error {
		return func(d *Datapath) error {
			got, err := d.SeedPolicyCT(ends)
			if err != nil {
				return err
			}
			if got.Written != len(ends) {
				t.Errorf("SeedPolicyCT(%v) = %+v, want %d written", ends, got, len(ends))
			}
			_, err = d.PurgePolicyCT(PolicyCTPurge{Endpoints: map[netip.Addr]bool{b: true},
				Allowed: func(e PolicyCTEnd) bool { return e.Egress == egressOpen }})
			return err
		}
	}
	fromA := func(name string, p pkt, pass bool) policyStep {
		r := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "to-pod", progCase: progCase{name: name,
			in: p.build(), ctx: ctxPodA, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}}
		if pass {
			r.counterDir, r.verdict, r.out, r.reason = "from-pod", tcActRedirect, delivered(p), "FORWARDED"
		}
		return r
	}
	segA := ipv4(protoTCP, podA, podBIP).withSrc(podA, 8080).withDst(podBIP, 40001).withTCPFlags(tcpACK)
	dgramA := ipv4(protoUDP, podA, podBIP).withSrc(podA, 53).withDst(podBIP, 40002)
	notSeeded := fromA("B isolated for ingress: A's segment on a connection not seeded is denied", segA, false)
	notSeeded.seed = ingressB
	seeded := fromA("the connection B opened, seeded: A's segment reaches B", segA, true)
	seeded.change = seed(true, PolicyCTEnd{Local: b, Peer: a, LocalPort: 40001, PeerPort: 8080, Proto: unix.IPPROTO_TCP, Egress: true},
		PolicyCTEnd{Local: b, Peer: a, LocalPort: 40002, PeerPort: 53, Proto: unix.IPPROTO_UDP, Egress: true})
	otherPort := fromA("A's segment from another port: judged, denied", segA.withSrc(podA, 8081), false)
	syn := fromA("A's SYN on the seeded tuple: a new connection, judged, denied", segA.withTCPFlags(tcpSYN), false)
	udp := fromA("A's datagram on the UDP flow B opened, seeded: reaches B", dgramA, true)

	replyB := fromPodB(ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, 40003).withTCPFlags(tcpACK))
	replyRow := func(name string, pass bool) policyStep {
		r := policyStep{policyRow: policyRow{prog: fromPod, counterDir: "from-pod", progCase: progCase{name: name,
			in: replyB.build(), ctx: ctxPodB, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}}}
		if pass {
			r.verdict, r.out, r.reason = tcActRedirect, toA(replyB), "FORWARDED"
		}
		return r
	}
	replyDenied := replyRow("B isolated for egress: its reply on a connection not seeded is denied", false)
	replyDenied.seed = egressB
	replySeeded := replyRow("the connection A opened to B:8080, seeded: B's reply reaches A", true)
	replySeeded.change = seed(false, PolicyCTEnd{Local: b, Peer: a, LocalPort: 8080, PeerPort: 40003, Proto: unix.IPPROTO_TCP})
	runPolicySteps(t, d, []policyStep{notSeeded, seeded, otherPort, syn, udp, replyDenied, replySeeded})

	// A seed of a connection already tracked at this end changes nothing.
	again, err := d.SeedPolicyCT([]PolicyCTEnd{{Local: b, Peer: a, LocalPort: 8080, PeerPort: 40003, Proto: unix.IPPROTO_TCP}})
	if err != nil || again != (PolicyCTSeeded{}) {
		t.Errorf("seeding a tracked end again: %+v, %v; want nothing written", again, err)
	}
}
