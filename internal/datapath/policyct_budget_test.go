package datapath

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// budgetStep is a policy step of pod src's packet p: ok passes to the stack,
// else it is dropped as DROP_POLICY_CT_BUDGET.
func budgetStep(name string, prog *ebpf.Program, dir string, p pkt, ctx *skbCtx, ok bool) policyStep {
	s := verdictStep(name, prog, dir, p, ctx, true)
	if !ok {
		s.verdict, s.reason = tcActShot, "DROP_POLICY_CT_BUDGET"
	}
	return s
}

// trackedEnds returns a step change that fails unless the one tracked entry's
// ends are want; why says which entry, when.
func trackedEnds(want uint32, why string) func(*Datapath) error {
	return func(d *Datapath) error {
		_, v, err := trackedOne(d)
		if err == nil && v.Ends != want {
			err = fmt.Errorf("%s: entry ends %#x, want %#x", why, v.Ends, want)
		}
		return err
	}
}

// overListed returns a step change that fails unless myelin_policy_ct_over lists
// exactly want (pod address: its count of entries).
func overListed(want map[string]uint32) func(*Datapath) error {
	return func(d *Datapath) error { return listed(d.objs.MyelinPolicyCtOver, want) }
}

// listed fails unless a budget's list holds exactly want (pod address: its count).
func listed(list *ebpf.Map, want map[string]uint32) error {
	got := map[string]uint32{}
	err := dumpEntries(list, func(addr, n uint32) { got[addrFromNetwork(addr).String()] = n })
	if err == nil && !maps.Equal(got, want) {
		err = fmt.Errorf("%s lists %v, want %v", list, got, want)
	}
	return err
}

// forgetPolicyCTOf deletes the tracked UDP connections of pod A's source ports,
// as their idle timeout would.
func forgetPolicyCTOf(sports ...uint16) func(*Datapath) error {
	return func(d *Datapath) error {
		a := networkUint32(mustAddr(podA))
		for _, sport := range sports {
			var doomed []myelinPolicyCtKey
			for k := range policyCTEntries(d) {
				if (k.AddrLo == a && k.PortLo == htons(sport)) || (k.AddrHi == a && k.PortHi == htons(sport)) {
					doomed = append(doomed, k)
				}
			}
			if len(doomed) != 1 {
				return fmt.Errorf("A's connections from port %d: %d tracked, want 1", sport, len(doomed))
			}
			if !policyCTDelete(d, doomed[0]) {
				return fmt.Errorf("A's connection from port %d: not deleted", sport)
			}
		}
		return nil
	}
}

// One pod opening connections faster than they end can't evict every other pod's
// (policy-ct-pod-max): GCPolicyCT lists a pod holding more entries than its budget,
// and the datapath drops that pod's connections that would need a new entry, in
// either direction, while its tracked ones and the other pods' new ones go on;
// once it holds no more than its budget, it opens connections again.
func TestPrivilegedBPFPolicyCTBudget(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTPodMax: 3})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	dns := PolicyPort{Proto: protoUDP, Lo: 53, Hi: 53}
	// A and B may query the remote pod's port 53, and B takes TCP 8080 from it.
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress, podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idRemote): {dns}, egressOf(podBIP, idRemote): {dns},
			ingressOf(podBIP, idRemote): {tcpPort(8080)}}}
	queryA := func(sport uint16) pkt {
		return ipv4(protoUDP, podA, remoteIP).withSrc(podA, sport).withDst(remoteIP, 53)
	}
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	queryB := func(sport uint16) pkt {
		return ipv4(protoUDP, podBIP, remoteIP).withSrc(podBIP, sport).withDst(remoteIP, 53).withMACs(podBMAC, hostBMAC)
	}
	synToB := func(sport uint16) pkt {
		return ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, sport).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	}
	first := budgetStep("A's first query (tracked)", fromPod, "from-pod", queryA(5001), ctxPodA, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		budgetStep("A's second query", fromPod, "from-pod", queryA(5002), ctxPodA, true),
		budgetStep("A's third query", fromPod, "from-pod", queryA(5003), ctxPodA, true),
		budgetStep("A's fourth query: not yet counted, tracked", fromPod, "from-pod", queryA(5004), ctxPodA, true),
		budgetStep("B's query", fromPod, "from-pod", queryB(6001), ctxB, true),
		after(budgetStep("counted: A holds 4 > 3, its next new query is dropped", fromPod, "from-pod", queryA(5005), ctxPodA, false),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 4})),
		budgetStep("A's tracked connection goes on", fromPod, "from-pod", queryA(5001), ctxPodA, true),
		budgetStep("B, within its budget, opens another", fromPod, "from-pod", queryB(6002), ctxB, true),
		budgetStep("a connection into B too", toPod, "to-pod", synToB(7001), nil, true),
		budgetStep("and another", toPod, "to-pod", synToB(7002), nil, true),
		after(budgetStep("counted: B holds 4 > 3, a new connection into B is dropped", toPod, "to-pod", synToB(7003), nil, false),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 4, podBIP: 4})),
		after(budgetStep("two of A's connections ended: A holds 2, opens again", fromPod, "from-pod", queryA(5006), ctxPodA, true),
			forgetPolicyCTOf(5002, 5003), gcPolicyCTAt(0, 0), overListed(map[string]uint32{podBIP: 4})),
	})

	// A restarted agent's datapath keeps the budget from the pinned list before its
	// first GC round.
	again, err := Load(Config{PinDir: d.cfg.PinDir, HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTPodMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	runPolicySteps(t, again, []policyStep{
		budgetStep("after a restart, a new connection into B is still dropped", again.objs.MyelinToPod, "to-pod", synToB(7004), nil, false),
		budgetStep("and A still opens", again.objs.MyelinFromPod, "from-pod", queryA(5007), ctxPodA, true),
	})
}

// policy-ct-pod-max 0 is no budget: the datapath reads no list, so even a pod the
// list names opens connections.
func TestPrivilegedBPFPolicyCTNoBudget(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	st := &policyState{flags: map[string]PolicyFlags{podA: PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podA, idRemote): {{Proto: protoUDP, Lo: 53, Hi: 53}}}}
	listA := func(d *Datapath) error {
		addr, n := networkUint32(mustAddr(podA)), uint32(1000)
		return d.objs.MyelinPolicyCtOver.Put(&addr, &n)
	}
	q := ipv4(protoUDP, podA, remoteIP).withSrc(podA, 5001).withDst(remoteIP, 53)
	s := after(budgetStep("A, listed, opens a connection", d.objs.MyelinFromPod, "from-pod", q, ctxPodA, true), listA)
	s.seed = st
	runPolicySteps(t, d, []policyStep{
		s,
		after(budgetStep("GC without a budget leaves the list alone", d.objs.MyelinFromPod, "from-pod", q.withSrc(podA, 5002), ctxPodA, true),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 1000})),
	})
}

// Who opens a connection pays for its entry when the datapath knows the opener:
// a pod of this node (its source checked by myelin_from_pod) that floods pod B,
// whose policy admits it, fills its own budget, not B's: its new connections are
// dropped, B's own go on. A sender the datapath can't vouch for (a pod of another
// node, the world: what the uplink brings may carry any source address) is
// counted against the pod it reached, as every entry was before.
func TestPrivilegedBPFPolicyCTBudgetOpenerPays(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, PolicyCTPodMax: 3})
	fromPod, toPod := d.objs.MyelinFromPod, d.objs.MyelinToPod
	dns := PolicyPort{Proto: protoUDP, Lo: 53, Hi: 53}
	// B takes TCP 8080 from A and from the remote pod, and may query the remote
	// pod's port 53; A is not isolated.
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress | PolicyEgress},
		entries: map[PolicyKey][]PolicyPort{egressOf(podBIP, idRemote): {dns},
			ingressOf(podBIP, idA): {tcpPort(8080)}, ingressOf(podBIP, idRemote): {tcpPort(8080)}}}
	synAB := func(sport uint16) pkt {
		return ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	}
	fromA := func(name string, sport uint16, ok bool) policyStep {
		p := synAB(sport)
		c, dir := progCase{name: name, in: p.build(), ctx: ctxPodA, verdict: tcActRedirect, out: delivered(p), reason: "FORWARDED"}, "from-pod"
		if !ok { // B's ingress check drops it
			c.verdict, c.out, c.reason, dir = tcActShot, nil, "DROP_POLICY_CT_BUDGET", "to-pod"
		}
		return policyStep{policyRow: policyRow{prog: fromPod, counterDir: dir, progCase: c}}
	}
	synFromRemote := func(sport uint16) pkt {
		return ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, sport).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	}
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	queryB := func(sport uint16) pkt {
		return ipv4(protoUDP, podBIP, remoteIP).withSrc(podBIP, sport).withDst(remoteIP, 53).withMACs(podBMAC, hostBMAC)
	}
	first := fromA("A's SYN into B, BPF delivers it (tracked, A the opener)", 7001, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		fromA("its second", 7002, true),
		fromA("its third", 7003, true),
		fromA("its fourth: not yet counted, tracked", 7004, true),
		after(fromA("counted against A (4 > 3), not B: A's next SYN into B is dropped", 7005, false),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 4})),
		budgetStep("B opens a connection of its own", fromPod, "from-pod", queryB(6001), ctxB, true),
		budgetStep("the remote pod connects to B (counted against B)", toPod, "to-pod", synFromRemote(8001), nil, true),
		budgetStep("again", toPod, "to-pod", synFromRemote(8002), nil, true),
		budgetStep("and again: B holds 4 now, not yet counted", toPod, "to-pod", synFromRemote(8003), nil, true),
		after(budgetStep("counted against B (its query and the remote pod's three): B's next query is dropped", fromPod, "from-pod", queryB(6002), ctxB, false),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 4, podBIP: 4})),
	})
}

// An entry names the sender of the packet that wrote it when that is a pod of this
// node whose source was checked: pod A's SYN into B, which BPF delivers, names A,
// and so does a bare ACK of A's (a flood of such segments pays like one of SYNs);
// with source verification off no one is named.
func TestPrivilegedBPFPolicyCTOpener(t *testing.T) {
	requirePrivileged(t)
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	seg := func(prog *ebpf.Program, sport uint16, flags uint8) policyRow {
		p := ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 8080).withTCPFlags(flags)
		return policyRow{seed: st, prog: prog, counterDir: "from-pod", progCase: progCase{
			name: "A's segment into B, BPF delivers it", in: p.build(), ctx: ctxPodA,
			verdict: tcActRedirect, out: delivered(p), reason: "FORWARDED"}}
	}
	for _, c := range []struct {
		name     string
		noVerify bool
		flags    uint8
		opened   bool
	}{
		{"A's SYN: A opened it", false, tcpSYN, true},
		{"A's bare ACK: A wrote it", false, tcpACK, true},
		{"A's SYN, source verification off: no opener", true, tcpSYN, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, NodeIP: testNodeIP, NoSourceVerification: c.noVerify})
			runPolicyRows(t, d, []policyRow{seg(d.objs.MyelinFromPod, 7101, c.flags)})
			_, v, bBit := policyCTOnly(t, d, podBIP)
			want := bBit | inOf(bBit)
			if c.opened {
				want |= openedBy(bBit ^ policyCTEnds)
			}
			if v.Ends != want {
				t.Errorf("entry ends %#x, want %#x", v.Ends, want)
			}
		})
	}
}

// A purge keeps who pays for an entry: pod A opened a connection to B, A's
// labels change (its entries are forgotten at both ends), and B speaks first
// on it (a push, a keepalive): B's packet tracks it again and A still pays,
// not B. Before, the purge emptied the entry and B's packet wrote it anew
// naming B: a pod could move the cost of its connections onto a server of its
// node that pushes on them. Once A's pod is gone, the entry goes.
func TestPrivilegedBPFPolicyCTPurgeKeepsOpener(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP})
	// B takes 8080 from A; its egress is open.
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	seg, push := abSegments(3003)
	ctxB := &skbCtx{IngressIfindex: uint32(podB.IfIndex)}
	a := mustAddr(podA)
	purge := func(p PolicyCTPurge) func(*Datapath) error {
		return func(d *Datapath) error {
			n, err := d.PurgePolicyCT(p)
			if err == nil && n != 1 {
				err = fmt.Errorf("purge changed %d entries, want 1", n)
			}
			return err
		}
	}
	// As A's SYN into B, which BPF delivered, wrote it (TestPrivilegedBPFPolicyCTOpener).
	opened := func(d *Datapath) error {
		return policyCTPut(d, abKey(3003, 8080), myelinPolicyCtEntry{Ends: policyCTEndHi | policyCTOpenedLo}) // podA < podB
	}
	relabeled := PolicyCTPurge{Peers: map[netip.Addr]bool{a: true}}
	denyA := func(d *Datapath) error {
		return seedPolicyKeepingCT(d, policyState{flags: st.flags})
	}
	allowA := func(d *Datapath) error { return seedPolicyKeepingCT(d, *st) }
	first := after(verdictStep("A's labels changed and B no longer admits A: A's segment is denied, the entry allows nothing", d.objs.MyelinToPod, "to-pod", seg, nil, false),
		opened, purge(relabeled), trackedEnds(policyCTOpenedLo, "after the purge"), denyA)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		after(verdictStep("B admits A again: B's push is tracked again, A still pays", d.objs.MyelinFromPod, "from-pod", push, ctxB, true),
			trackedEnds(policyCTOpenedLo, "after the denied segment"), allowA),
	})
	if err := trackedEnds(policyCTEndHi|policyCTOpenedLo|policyCTOutHi, "after B's push (from B's egress check)")(d); err != nil {
		t.Error(err)
	}
	deleted := PolicyCTPurge{Peers: map[netip.Addr]bool{a: true}, Gone: map[netip.Addr]bool{a: true}}
	if err := purge(deleted)(d); err != nil {
		t.Fatal(err)
	}
	if n := len(policyCTEntries(d)); n != 0 {
		t.Errorf("A's pod gone: %d entries tracked, want none", n)
	}
}

// In tunnel mode a pod of another node that floods a pod of this node pays for
// the flood itself: the peer rule lets a cluster address in only from the node
// owning its PodCIDR, which checked it where it left the pod, so its entries
// name it; it is listed and its next new connection into this node is dropped,
// while B is not listed. Native routing's uplink vouches for nothing (any
// underlay host can send a pod's address there): the same flood counts against
// B (TestPrivilegedBPFPolicyCTBudgetOpenerPays).
func TestPrivilegedBPFPolicyCTBudgetTunnelOpenerPays(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, Tunnel: true, OverlayIfIndex: testOverlayIfIndex,
		OverlayMAC: testOverlayMAC, NodeIP: mustAddr("198.51.100.1"), TunnelPort: tunnelPort, ClusterCIDR: testClusterCIDR,
		PolicyCTPodMax: 3})
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idRemote): {tcpPort(8080)}}}
	fromRemote := func(name string, sport uint16, ok bool) policyStep {
		inner := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, sport).withDst(podBIP, 8080).withTCPFlags(tcpSYN).
			withMACs(OverlayMAC(mustAddr("198.51.100.2")), testOverlayMAC)
		c := progCase{name: name, endpoints: seedB, tunnels: seedTunnelB, in: vxlanToA("198.51.100.2", 0, inner.build()).build(),
			verdict: tcActRedirect, out: delivered(inner), reason: "FORWARDED", countDir: "from-overlay", countLen: true}
		if !ok { // decapsulated, then B's ingress check drops it
			c.verdict, c.reason, c.countDir = tcActShot, "DROP_POLICY_CT_BUDGET", "to-pod"
			c.out = inner.withMACs(mac("02:00:00:00:00:02"), mac("00:00:00:00:00:00")).build()
		}
		return policyStep{policyRow: policyRow{prog: d.objs.MyelinFromNetdev, counterDir: "from-netdev", progCase: c}}
	}
	// podB 10.1.0.20 < remote 10.2.0.33
	opener := trackedEnds(policyCTEndLo|policyCTOpenedHi|policyCTInLo, "the remote pod's entry (B accepted it, the remote pod opened it)")
	first := fromRemote("the remote pod's SYN into B, decapsulated and delivered (tracked)", 7001, true)
	first.seed = st
	runPolicySteps(t, d, []policyStep{
		first,
		after(fromRemote("its second", 7002, true), opener),
		fromRemote("its third", 7003, true),
		fromRemote("its fourth: not yet counted, tracked", 7004, true),
		after(fromRemote("counted against the remote pod (4 > 3), not B: its next SYN into B is dropped", 7005, false),
			gcPolicyCTAt(0, 0), overListed(map[string]uint32{remoteIP: 4})),
	})
}

// A list too small for every pod over the budget (a small budget, and pods of
// other nodes that can be listed too in tunnel mode) holds the biggest holders,
// a new big one taking the place of a smaller one listed before, and the flag
// the datapath reads is set; the error says how many did not fit. Before, the
// first pod that did not fit ended the round with the flag as it was: off,
// nothing was enforced at all.
func TestPrivilegedPodBudgetFullList(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTPodMax: 3, EndpointsMax: 2})
	held := podCounts{}
	for addr, n := range map[string]uint32{"10.1.0.10": 10, "10.2.0.33": 20} {
		held[networkUint32(mustAddr(addr))] = n
	}
	if err := d.policyCTBudget().sync(held); err != nil {
		t.Fatal(err)
	}
	held[networkUint32(mustAddr("10.2.0.34"))] = 30
	err := d.policyCTBudget().sync(held)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 not listed") || !strings.Contains(err.Error(), "10.1.0.10 holding 10") {
		t.Errorf("sync of 3 into a list of 2: %v, want 1 of 3 not listed, 10.1.0.10", err)
	}
	if err := listed(d.objs.MyelinPolicyCtOver, map[string]uint32{"10.2.0.33": 20, "10.2.0.34": 30}); err != nil {
		t.Error(err)
	}
	var st myelinBudgetState
	if err := d.objs.MyelinBudgets.Lookup(budgetPolicyCT, &st); err != nil || st.AnyOver != 1 || st.Max != 3 {
		t.Errorf("myelin_budgets[policy ct] = %+v, %v; want any_over 1 (listed pods' new connections dropped), max 3", st, err)
	}
}

// What the stack delivers (legacy host routing) from a pod of this node names
// that pod the opener when it entered the node on the pod's own veth, where
// myelin_from_pod checked its source: A, not isolated, floods B through the
// stack and is listed itself. The same packet entering on another device (the
// uplink: any host there can send A's address) names no one and counts
// against B, as before.
func TestPrivilegedBPFPolicyCTOpenerStackDelivered(t *testing.T) {
	requirePrivileged(t)
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	synAB := func(sport uint16) pkt {
		return ipv4(protoTCP, podA, podBIP).withSrc(podA, sport).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	}
	onVethA, onUplink := &skbCtx{IngressIfindex: uint32(podASender.IfIndex)}, &skbCtx{IngressIfindex: 2}
	t.Run("from A's veth: A opened it, A pays", func(t *testing.T) {
		d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTPodMax: 3})
		toPod := d.objs.MyelinToPod
		first := budgetStep("A's SYN into B, through the stack (tracked, A the opener)", toPod, "to-pod", synAB(7001), onVethA, true)
		first.seed = st
		opened := trackedEnds(policyCTEndHi|policyCTOpenedLo|policyCTInHi, "A's entry (B accepted it, A opened it)") // podA < podB
		runPolicySteps(t, d, []policyStep{
			first,
			after(budgetStep("its second", toPod, "to-pod", synAB(7002), onVethA, true), opened),
			budgetStep("its third", toPod, "to-pod", synAB(7003), onVethA, true),
			budgetStep("its fourth: not yet counted, tracked", toPod, "to-pod", synAB(7004), onVethA, true),
			after(budgetStep("counted against A (4 > 3), not B: A's next SYN into B is dropped", toPod, "to-pod", synAB(7005), onVethA, false),
				gcPolicyCTAt(0, 0), overListed(map[string]uint32{podA: 4})),
		})
	})
	for _, c := range []struct {
		name     string
		ctx      *skbCtx
		flags    uint8
		noVerify bool
		opened   bool
	}{
		{"A's bare ACK from A's veth: A wrote it", onVethA, tcpACK, false, true},
		{"A's address from the uplink: no opener (any host there can send it)", onUplink, tcpSYN, false, false},
		{"A's SYN from A's veth, source verification off: no opener", onVethA, tcpSYN, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTPodMax: 3, NoSourceVerification: c.noVerify})
			first := budgetStep(c.name, d.objs.MyelinToPod, "to-pod", synAB(7001).withTCPFlags(c.flags), c.ctx, true)
			first.seed = st
			runPolicySteps(t, d, []policyStep{first})
			want := policyCTEndHi | policyCTInHi
			if c.opened {
				want |= policyCTOpenedLo
			}
			if err := trackedEnds(want, c.name)(d); err != nil {
				t.Error(err)
			}
		})
	}
}

// In tunnel mode with legacy host routing the stack delivers what arrives from
// other nodes: a pod of another node whose SYN entered through myelin_vxlan
// (where myelin_from_overlay let its address in only from the node owning its
// PodCIDR, which checked it) is named the opener, as it is where BPF delivers
// (the opener pays: TestPrivilegedBPFPolicyCTBudgetTunnelOpenerPays). The same
// address entering on the uplink, or with source verification off, names no
// one.
func TestPrivilegedBPFPolicyCTOpenerOverlayStackDelivered(t *testing.T) {
	requirePrivileged(t)
	st := &policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idRemote): {tcpPort(8080)}}}
	syn := ipv4(protoTCP, remoteIP, podBIP).withSrc(remoteIP, 7001).withDst(podBIP, 8080).withTCPFlags(tcpSYN)
	for _, c := range []struct {
		name     string
		ctx      *skbCtx
		noVerify bool
		opened   bool
	}{
		{"a remote pod's SYN from myelin_vxlan: it opened it", &skbCtx{IngressIfindex: testOverlayIfIndex}, false, true},
		{"the same from the uplink: no opener", &skbCtx{IngressIfindex: 2}, false, false},
		{"from myelin_vxlan, source verification off: no opener", &skbCtx{IngressIfindex: testOverlayIfIndex}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := loadTestConfig(t, Config{HostRouting: HostRoutingLegacy, Tunnel: true, OverlayIfIndex: testOverlayIfIndex,
				OverlayMAC: testOverlayMAC, NodeIP: mustAddr("198.51.100.1"), TunnelPort: tunnelPort, ClusterCIDR: testClusterCIDR,
				NoSourceVerification: c.noVerify})
			first := budgetStep(c.name, d.objs.MyelinToPod, "to-pod", syn, c.ctx, true)
			first.seed = st
			runPolicySteps(t, d, []policyStep{first})
			want := policyCTEndLo | policyCTInLo // podB 10.1.0.20 < the remote pod 10.2.0.33
			if c.opened {
				want |= policyCTOpenedHi
			}
			if err := trackedEnds(want, c.name)(d); err != nil {
				t.Error(err)
			}
		})
	}
}
