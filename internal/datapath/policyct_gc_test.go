package datapath

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// trackedOne returns the one tracked connection's entry (an error unless there is
// exactly one).
func trackedOne(d *Datapath) (myelinPolicyCtKey, myelinPolicyCtEntry, error) {
	all := policyCTEntries(d)
	if len(all) != 1 {
		return myelinPolicyCtKey{}, myelinPolicyCtEntry{}, fmt.Errorf("myelin_policy_ct holds %d entries, want 1", len(all))
	}
	for k, v := range all {
		return k, v, nil
	}
	panic("unreachable")
}

// gcPolicyCTAt returns a step change that runs GCPolicyCT at later past the
// monotonic clock's now and fails unless it removed want entries.
func gcPolicyCTAt(later time.Duration, want int) func(*Datapath) error {
	return func(d *Datapath) error {
		at := MonotonicNow() + later
		if err := roundsRanUntil(d, at); err != nil {
			return err
		}
		n, err := d.GCPolicyCT(at)
		if err == nil && n != want {
			err = fmt.Errorf("GCPolicyCT %v from now removed %d entries, want %d", later, n, want)
		}
		return err
	}
}

// roundsRanUntil makes d's table look as if, once a GC round walked it, the
// agent's rounds had gone on every 10 s until just before at and found nothing
// to do: a test's jump in time is no agent down (policyCTClocksFresh).
func roundsRanUntil(d *Datapath, at time.Duration) error {
	return d.withPolicyCT(func(t *policyCTTable) error {
		if last := t.clocks(); *last != 0 {
			*last = policyCTUnits(at - 10*time.Second)
			*t.resets() = *last
		}
		return nil
	})
}

// verdictStep is a policy step with the stack's delivery: ok passes (to the stack),
// else the policy denies.
func verdictStep(name string, prog *ebpf.Program, dir string, p pkt, ctx *skbCtx, ok bool) policyStep {
	return frameStep(name, prog, dir, p.build(), ctx, ok)
}

// frameStep is verdictStep for a frame already rendered (a fragment).
func frameStep(name string, prog *ebpf.Program, dir string, frame []byte, ctx *skbCtx, ok bool) policyStep {
	c := progCase{name: name, in: frame, ctx: ctx, verdict: tcActShot, reason: "DROP_POLICY_DENIED"}
	if ok {
		c.verdict, c.reason = tcActOK, "PASS_STACK"
	}
	return policyStep{policyRow: policyRow{prog: prog, counterDir: dir, progCase: c}}
}

// isolatedB is pod B isolated both ways, allowing pod A in on ports and nothing out.
func isolatedB(ports ...PolicyPort) *policyState {
	return &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): ports}}
}

// abSegments are an established segment (ACK) of A:sport's connection to B:8080 and
// B's reply.
func abSegments(sport uint16) (seg, reply pkt) {
	seg = ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 8080).withTCPFlags(tcpACK)
	reply = ipv4(protoTCP, podBIP, podA).withSrc(podBIP, 8080).withDst(podA, sport).withTCPFlags(tcpACK).withMACs(podBMAC, hostBMAC)
	return seg, reply
}

// after is step s run after changes, in order.
func after(s policyStep, changes ...func(*Datapath) error) policyStep {
	s.change = func(d *Datapath) error {
		for _, c := range changes {
			if err := c(d); err != nil {
				return err
			}
		}
		return nil
	}
	return s
}

// A UDP connection has no close to follow: its entry keeps when it was last seen,
// refreshed by its packets, and GCPolicyCT deletes it once idle past
// PolicyCTTimeoutOther, after which the egress-isolated server's reply is judged by
// its egress rules again (denied) until the client's next datagram tracks it again.
func TestPrivilegedBPFPolicyCTGCIdleUDP(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	st := isolatedB(PolicyPort{Proto: protoUDP, Lo: 53, Hi: 53})
	query := ipv4(protoUDP, podA, podBIP).withSrc(podA, 4001).withDst(podBIP, 53)
	answer := ipv4(protoUDP, podBIP, podA).withSrc(podBIP, 53).withDst(podA, 4001).withMACs(podBMAC, hostBMAC)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}

	// seenNow checks that the entry's last seen is the datapath clock's now.
	seenNow := func(d *Datapath) error {
		_, v, err := trackedOne(d)
		if err != nil {
			return err
		}
		if now := policyCTUnits(MonotonicNow()); v.FinLo+1 < now || v.FinLo > now {
			return fmt.Errorf("tracked UDP connection last seen %d, want now (%d)", v.FinLo, now)
		}
		return nil
	}
	// aged makes the entry look last seen long ago, as if idle for ten minutes.
	aged := func(d *Datapath) error {
		k, v, err := trackedOne(d)
		if err != nil {
			return err
		}
		v.FinLo = policyCTUnits(MonotonicNow() - 10*time.Minute)
		return policyCTPut(d, k, v)
	}
	first := verdictStep("A's query enters B (allowed: tracked)", toPod, "to-pod", query, nil, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		after(verdictStep("B's answer leaves B (tracked, last seen now)", fromPod, "from-pod", answer, ctxB, true), seenNow),
		after(verdictStep("idle for 30 s: GC keeps it, B answers", fromPod, "from-pod", answer, ctxB, true),
			gcPolicyCTAt(30*time.Second, 0)),
		after(verdictStep("made ten minutes old, B's answer refreshes it", fromPod, "from-pod", answer, ctxB, true), aged),
		after(verdictStep("refreshed: GC 30 s later keeps it", fromPod, "from-pod", answer, ctxB, true),
			seenNow, gcPolicyCTAt(30*time.Second, 0)),
		after(verdictStep("idle past the timeout: GC deletes it, B's answer is denied", fromPod, "from-pod", answer, ctxB, false),
			gcPolicyCTAt(PolicyCTTimeoutOther+5*time.Second, 1)),
		verdictStep("A's next query enters B (tracked again)", toPod, "to-pod", query, nil, true),
		verdictStep("B answers again", fromPod, "from-pod", answer, ctxB, true),
	})
}

// A TCP connection an RST ended has no FINs to follow: the RST marks its entry and
// GCPolicyCT deletes it when the mark is still there at its next round. An RST the
// connection outlives (one the receiver ignored) is unmarked by its next segment, and
// an established connection idle for less than PolicyCTTimeoutTCP is kept.
func TestPrivilegedBPFPolicyCTGCReset(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	st := isolatedB(tcpPort(8080))
	seg, reply := abSegments(3003)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	marked := func(want bool) func(*Datapath) error {
		return func(d *Datapath) error {
			_, v, err := trackedOne(d)
			if err == nil && (v.Closing&policyCTReset != 0) != want {
				err = fmt.Errorf("tracked connection's close state %#x, want reset marked: %v", v.Closing, want)
			}
			return err
		}
	}
	first := verdictStep("A's segment enters B (allowed: tracked)", toPod, "to-pod", seg, nil, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		verdictStep("B replies (tracked)", fromPod, "from-pod", reply, ctxB, true),
		after(verdictStep("idle 50 minutes after a reply: GC keeps it, B replies", fromPod, "from-pod", reply, ctxB, true),
			gcPolicyCTAt(0, 0), gcPolicyCTAt(50*time.Minute, 0)),
		verdictStep("A's RST enters B (tracked: marks it reset)", toPod, "to-pod", seg.withTCPFlags(0x14), nil, true),
		after(verdictStep("B's next segment passes and unmarks it", fromPod, "from-pod", reply, ctxB, true),
			marked(true), gcPolicyCTAt(0, 0)),
		after(verdictStep("unmarked: the next GC round keeps it", fromPod, "from-pod", reply, ctxB, true),
			marked(false), gcPolicyCTAt(0, 0)),
		verdictStep("B's RST leaves B (tracked: marks it reset)", fromPod, "from-pod", reply.withTCPFlags(0x04), ctxB, true),
		after(verdictStep("marked at two GC rounds: deleted, B's segment is denied", fromPod, "from-pod", reply, ctxB, false),
			marked(true), gcPolicyCTAt(0, 0), gcPolicyCTAt(0, 1)),
	})
}

// A TCP connection whose FINs never come (a client gone, a handshake a SYN flood
// never completed) gives its entry back once idle: after PolicyCTTimeoutTCPUnseen
// when no lookup found it after its write, after PolicyCTTimeoutTCP when one did.
// Each GC round that finds it seen (a tracked packet passed since the last round)
// restarts its idle clock. Before, such entries stayed for good and counted against
// the pod's policy-ct-pod-max until every new connection of the pod was dropped.
func TestPrivilegedBPFPolicyCTGCIdleTCP(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	st := isolatedB(tcpPort(8080))
	seg, reply := abSegments(3003)
	stray, strayReply := abSegments(3004)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	const seenAt = 31 * time.Minute
	first := verdictStep("A's segment enters B (allowed: tracked)", toPod, "to-pod", seg, nil, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		after(verdictStep("the GC's first round and 59 s later keep it, B replies", fromPod, "from-pod", reply, ctxB, true),
			gcPolicyCTAt(0, 0), gcPolicyCTAt(59*time.Second, 0)),
		verdictStep("A's segment from another port enters B (tracked)", toPod, "to-pod", stray, nil, true),
		after(verdictStep("never looked up, 65 s later deleted: B's reply on it is denied", fromPod, "from-pod", strayReply, ctxB, false),
			gcPolicyCTAt(65*time.Second, 1)),
		after(verdictStep("the replied connection, idle 30 minutes: kept, B replies", fromPod, "from-pod", reply, ctxB, true),
			gcPolicyCTAt(30*time.Minute, 0)),
		after(verdictStep("seen at 31 min, idle a minute less than the timeout since: kept, B replies", fromPod, "from-pod", reply, ctxB, true),
			gcPolicyCTAt(seenAt, 0), gcPolicyCTAt(seenAt+PolicyCTTimeoutTCP-time.Minute, 0)),
		after(verdictStep("seen again, idle a minute past the timeout since: deleted, B's reply is denied", fromPod, "from-pod", reply, ctxB, false),
			gcPolicyCTAt(seenAt+PolicyCTTimeoutTCP, 0), gcPolicyCTAt(seenAt+2*PolicyCTTimeoutTCP+time.Minute, 1)),
		verdictStep("A's next segment enters B (tracked again)", toPod, "to-pod", seg, nil, true),
		verdictStep("B replies again", fromPod, "from-pod", reply, ctxB, true),
	})
}

// policyCTIdleTCP's boundaries: TCP only, from born, by whether the entry carried
// traffic after its write.
func TestPolicyCTIdleTCP(t *testing.T) {
	now := policyCTUnits(3 * time.Hour)
	udp, tcp := myelinPolicyCtKey{Proto: protoUDP}, myelinPolicyCtKey{Proto: protoTCP}
	for _, c := range []struct {
		name string
		k    myelinPolicyCtKey
		ref  uint32
		born uint32
		want bool
	}{
		{"unseen, just past its timeout", tcp, 0, now - policyCTUnits(PolicyCTTimeoutTCPUnseen) - 1, true},
		{"unseen, within its timeout", tcp, 0, now - policyCTUnits(PolicyCTTimeoutTCPUnseen), false},
		{"seen at a round, past the unseen timeout", tcp, policyCTRefRound, now - policyCTUnits(10*time.Minute), false},
		{"seen at a round, just past its timeout", tcp, policyCTRefRound, now - policyCTUnits(PolicyCTTimeoutTCP) - 1, true},
		{"in use (a lookup before the agent's first round), within an hour", tcp, policyCTRefInUse, now - policyCTUnits(10*time.Minute), false},
		{"seen since the last round only (not noted yet), past the unseen timeout", tcp, policyCTRefSeen, now - policyCTUnits(2*time.Minute), true},
		{"born ahead of now (the GC's clock read first)", tcp, 0, now + 1, false},
		{"UDP (its own last seen decides)", udp, 0, now - policyCTUnits(2*time.Hour), false},
	} {
		if got := policyCTIdleTCP(c.k, c.ref, c.born, now); got != c.want {
			t.Errorf("%s: idle %v, want %v", c.name, got, c.want)
		}
	}
}

// policyCTIdle's boundaries: only non-TCP entries, past the timeout or with a last seen
// no datapath clock wrote.
func TestPolicyCTIdle(t *testing.T) {
	now := policyCTUnits(time.Hour)
	udp, tcp := myelinPolicyCtKey{Proto: protoUDP}, myelinPolicyCtKey{Proto: protoTCP}
	for _, c := range []struct {
		name string
		k    myelinPolicyCtKey
		seen uint32
		want bool
	}{
		{"UDP seen 10 min ago", udp, now - policyCTUnits(10*time.Minute), true},
		{"UDP seen just past the timeout", udp, now - policyCTUnits(PolicyCTTimeoutOther) - 1, true},
		{"UDP seen within the timeout", udp, now - policyCTUnits(PolicyCTTimeoutOther), false},
		{"UDP seen now", udp, now, false},
		{"UDP seen later than now (the GC's clock read first)", udp, now + 1, false},
		{"UDP seen two units ahead of now (the GC's clock read first)", udp, now + 2, false},
		{"UDP seen three units ahead (no time the datapath wrote)", udp, now + 3, true},
		{"UDP seen far ahead (a FIN number written into a reused slot)", udp, now + 1<<31 - 1, true},
		{"UDP with a last seen of 0", udp, 0, true},
		{"TCP (its FIN number, not a time)", tcp, now - policyCTUnits(10*time.Minute), false},
	} {
		if got := policyCTIdle(c.k, myelinPolicyCtEntry{Ends: policyCTEndLo, FinLo: c.seen}, now); got != c.want {
			t.Errorf("%s: idle %v, want %v", c.name, got, c.want)
		}
	}
}

// An entry counts against the opener it names (a pod of this node whose source
// the datapath checked), else against each local end it carries (another
// node's pod, the world, the node's own stack; an entry written before the
// opener was noted).
func TestPolicyCTHeld(t *testing.T) {
	const lo, hi = "10.1.0.10", "10.1.0.20"
	k := myelinPolicyCtKey{AddrLo: networkUint32(mustAddr(lo)), AddrHi: networkUint32(mustAddr(hi)), Proto: protoTCP}
	for _, c := range []struct {
		name  string
		ends  uint32
		payer []string
	}{
		{"lo opened it: lo alone, though both ends accepted it", policyCTEnds | policyCTOpenedLo, []string{lo}},
		{"hi opened it, lo accepted it", policyCTEndLo | policyCTOpenedHi, []string{hi}},
		{"lo opened it, only hi is a tracked end", policyCTEndHi | policyCTOpenedLo, []string{lo}},
		{"no opener (a sender of another node): each local end", policyCTEnds, []string{lo, hi}},
		{"no opener, one local end", policyCTEndHi, []string{hi}},
		{"hi opened it, no end left (after a purge or an RST): nobody, it tracks nothing", policyCTOpenedHi, nil},
	} {
		h, want := podCounts{}, podCounts{}
		policyCTHeld(h, k, myelinPolicyCtEntry{Ends: c.ends})
		for _, a := range c.payer {
			want.add(mustAddr(a))
		}
		if !maps.Equal(h, want) {
			t.Errorf("%s: counted %v, want %v", c.name, h, want)
		}
	}
}

// The clocks are fresh while the header's last round is less than
// policyCTClocksStale ago, or a little ahead (another agent's round stored
// later): never walked, too long ago and far ahead are not.
func TestPolicyCTClocksFresh(t *testing.T) {
	now := policyCTUnits(10 * time.Hour)
	for _, c := range []struct {
		name string
		last uint32
		want bool
	}{
		{"never walked", 0, false},
		{"walked this round's unit", now, true},
		{"walked 70 s ago (rounds slowed down)", now - policyCTUnits(70*time.Second), true},
		{"walked 4 min ago", now - policyCTUnits(4*time.Minute), true},
		{"walked 6 min ago", now - policyCTUnits(6*time.Minute), false},
		{"walked an hour ago", now - policyCTUnits(time.Hour), false},
		{"two units ahead (another agent's round)", now + 2, true},
		{"three units ahead", now + 3, false},
		{"half the clock's range ahead", now + 1<<31, false},
	} {
		if got := policyCTClocksFresh(c.last, now); got != c.want {
			t.Errorf("%s: fresh %v, want %v", c.name, got, c.want)
		}
	}
}

// policyCTResetGraceOver's boundaries: the grace from the last round in whole
// units of a clock read later, a last round ahead of now.
func TestPolicyCTResetGraceOver(t *testing.T) {
	now := policyCTUnits(time.Hour)
	if policyCTUnits(policyCTResetGrace) != 4 {
		t.Fatalf("the cases below assume a grace of 4 whole units, not %d", policyCTUnits(policyCTResetGrace))
	}
	for _, c := range []struct {
		last uint32
		want bool
	}{
		{now, false},
		{now - 5, false}, // may be 4.3 s apart
		{now - 6, true},  // at least 5.4 s apart
		{now - 1000, true},
		{now + 1, false},
	} {
		if got := policyCTResetGraceOver(c.last, now); got != c.want {
			t.Errorf("policyCTResetGraceOver(last %d, now %d) = %v, want %v", c.last, now, got, c.want)
		}
	}
}

// Idle TCP connections with Linux's default keepalive (first probe after
// net.ipv4.tcp_keepalive_time, 2 h, the next 75 s later) keep their
// NetworkPolicy tracking and their NAT port: both timeouts outlast the first
// probe and its retry, with a GC round (10 s) to spare.
func TestTCPTimeoutsOutlastKeepalive(t *testing.T) {
	const keepalive = 2*time.Hour + 75*time.Second + 10*time.Second
	for name, d := range map[string]time.Duration{
		"PolicyCTTimeoutTCP": PolicyCTTimeoutTCP, "NATTimeoutTCPEstablished": NATTimeoutTCPEstablished,
	} {
		if d <= keepalive {
			t.Errorf("%s = %v: an idle connection with keepalive on loses its entry before its first probe (%v)", name, d, keepalive)
		}
	}
}
