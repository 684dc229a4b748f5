package datapath

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// One pod opening flows out of the cluster faster than they idle out can't take
// every other pod's way out (nat-pod-max): GCNAT lists a pod holding more
// masqueraded flows than its budget, and the datapath drops that pod's new flows as
// DROP_NAT_BUDGET, creating no entries, while its open flows and the other pods' new
// ones are translated; once it holds no more than its budget, it opens flows again.
func TestPrivilegedBPFNATBudget(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, Masquerade: true, NodeIP: testNodeIP,
		ClusterCIDR: testClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort, NATPodMax: 2})
	if err := d.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	const other = "10.1.0.98"
	open := []NATEntry{
		flow(protoUDP, podA, 5001, testNATPort, extHost, 53, "udp"),
		flow(protoUDP, podA, 5002, testNATPort, extHost, 54, "udp"),
		flow(protoUDP, podA, 5003, testNATPort, extHost, 55, "udp"),
		flow(protoUDP, other, 6001, testNATPort, extHost, 56, "udp"),
	}
	if err := seedNAT(d, open, 0); err != nil {
		t.Fatal(err)
	}
	newFlow := ipv4(protoTCP, podA, extHost) // 40000 -> 8080
	drop := progCase{name: "A holds 3 > 2: its new flow is dropped", in: newFlow.build(), verdict: tcActShot, reason: "DROP_NAT_BUDGET"}
	udpA := ipv4(protoUDP, podA, extHost).withSrc(podA, 5001).withDst(extHost, 53)
	openA := progCase{name: "A's open flow is translated", in: udpA.build(), verdict: tcActOK,
		out: udpA.withSrc(nodeIP, testNATPort).build(), reason: "PASS_STACK"}
	tcpOther := ipv4(protoTCP, other, extHost)
	newOther := progCase{name: "another pod's new flow is translated", in: tcpOther.build(), verdict: tcActOK,
		out: tcpOther.withSrc(nodeIP, testNATPort).build(), reason: "PASS_STACK"}
	steps := []struct {
		before func() error
		c      progCase
		want   []NATEntry
	}{
		{func() error { return gcNATListing(d, map[string]uint32{podA: 3}) }, drop, open},
		{nil, openA, open},
		{nil, newOther, append(append([]NATEntry{}, open...), flow(protoTCP, other, 40000, testNATPort, extHost, 8080, "tcp-syn"))},
		{func() error { // two of A's flows idled out: A holds 1
			if err := seedNAT(d, []NATEntry{open[0], open[3]}, 0); err != nil {
				return err
			}
			return gcNATListing(d, map[string]uint32{})
		}, progCase{name: "A within its budget again: its new flow is translated", in: newFlow.build(), verdict: tcActOK,
			out: newFlow.withSrc(nodeIP, testNATPort).build(), reason: "PASS_STACK"},
			[]NATEntry{open[0], open[3], flow(protoTCP, podA, 40000, testNATPort, extHost, 8080, "tcp-syn")}},
	}
	for _, s := range steps {
		t.Run(s.c.name, func(t *testing.T) {
			if s.before != nil {
				if err := s.before(); err != nil {
					t.Fatal(err)
				}
			}
			if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", s.c); err != nil {
				t.Error(err)
			}
			want := slices.SortedFunc(slices.Values(s.want), compareNATEntries)
			if err := checkNAT(d, want); err != nil {
				t.Error(err)
			}
		})
	}
}

// gcNATListing runs GCNAT (removing nothing) and fails unless myelin_snat_over then
// lists exactly want.
func gcNATListing(d *Datapath, want map[string]uint32) error {
	n, err := d.GCNAT(MonotonicNow())
	if err == nil && n != 0 {
		err = fmt.Errorf("GCNAT removed %d entries, want none", n)
	}
	if err != nil {
		return err
	}
	return listed(d.objs.MyelinSnatOver, want)
}

// A pod whose flood filled the table within one GC round (a plain hash: every pod's
// new flow out would be DROP_NAT_FULL until the flood idles out) loses its flows
// beyond its budget at the round, the least recently seen first, so another pod's
// new flow finds room at once; the pod is listed and keeps its freshest flow.
func TestPrivilegedBPFNATBudgetTrimsAFullTable(t *testing.T) {
	requirePrivileged(t)
	d := loadTestConfig(t, Config{HostRouting: HostRoutingBPF, Masquerade: true, NodeIP: testNodeIP,
		ClusterCIDR: testClusterCIDR, NATMax: 8, NATPortMin: testNATPort, NATPortMax: testNATPort, NATPodMax: 1})
	if err := d.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	if err := clearNAT(d); err != nil {
		t.Fatal(err)
	}
	now := MonotonicNow()
	var flows []NATEntry
	for i := range 4 { // 8 entries: the table is full; port 5004 was seen last
		f := flow(protoUDP, podA, uint16(5001+i), testNATPort, extHost, uint16(53+i), "udp")
		if err := putNATFlow(d, f, now-time.Duration(4-i)*time.Second); err != nil {
			t.Fatal(err)
		}
		flows = append(flows, f)
	}
	tcpOther := ipv4(protoTCP, "10.1.0.98", extHost)
	newOther := progCase{name: "full: another pod's new flow", in: tcpOther.build(), verdict: tcActShot, reason: "DROP_NAT_FULL"}
	if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", newOther); err != nil {
		t.Fatal(err)
	}
	n, err := d.GCNAT(MonotonicNow())
	if err != nil || n != 6 {
		t.Fatalf("GCNAT: removed %d entries (%v), want 6: A's three least recently seen flows", n, err)
	}
	if err := listed(d.objs.MyelinSnatOver, map[string]uint32{podA: 4}); err != nil {
		t.Error(err)
	}
	newOther.name, newOther.verdict, newOther.out, newOther.reason = "trimmed: another pod's new flow is translated", tcActOK,
		tcpOther.withSrc(nodeIP, testNATPort).build(), "PASS_STACK"
	if err := checkCase(d, d.objs.MyelinToNetdev, "to-netdev", newOther); err != nil {
		t.Error(err)
	}
	want := []NATEntry{flows[3], flow(protoTCP, "10.1.0.98", 40000, testNATPort, extHost, 8080, "tcp-syn")}
	if err := checkNAT(d, slices.SortedFunc(slices.Values(want), compareNATEntries)); err != nil {
		t.Error(err)
	}
}

// An agent that adopts the pinned maps before it has its configuration (a restart,
// the apiserver unreachable) counts against the budgets the last Load wrote, and what
// its GC lists is applied by the programs that run: a pod that floods the masquerade
// table meanwhile has its next new flow dropped, not only once the new agent loads.
// A budget turned off clears its entry at the next round, so a later adoption does
// not apply the old one.
func TestPrivilegedAdoptedDatapathAppliesBudgets(t *testing.T) {
	requirePrivileged(t)
	cfg := Config{HostRouting: HostRoutingBPF, Masquerade: true, NodeIP: testNodeIP, ClusterCIDR: lbClusterCIDR,
		NATPortMin: testNATPort, NATPortMax: testNATPort + 100, NATPodMax: 2, LBCTPodMax: 7, PolicyCTPodMax: 9}
	running := loadTestConfig(t, cfg) // the last agent's programs, which stay attached
	if err := running.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	adopted, err := OpenPinned(running.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer adopted.Close()
	if got := [3]uint32{adopted.cfg.NATPodMax, adopted.cfg.LBCTPodMax, adopted.cfg.PolicyCTPodMax}; got != [3]uint32{2, 7, 9} {
		t.Fatalf("adopted budgets (nat, lb ct, policy ct) = %v, want the last Load's [2 7 9]", got)
	}
	// While the agent was away pod A opened three flows out: over its budget of 2.
	if err := seedNAT(running, []NATEntry{
		flow(protoUDP, podA, 5001, testNATPort, extHost, 53, "udp"),
		flow(protoUDP, podA, 5002, testNATPort+1, extHost, 54, "udp"),
		flow(protoUDP, podA, 5003, testNATPort+2, extHost, 55, "udp"),
	}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := adopted.GCNAT(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	over, err := adopted.PodsOverBudget()
	if err != nil || over.NAT[mustAddr(podA)] != 3 {
		t.Fatalf("pods over their NAT budget after the adopted round = %+v, %v; want A holding 3", over.NAT, err)
	}
	if err := checkCase(running, running.objs.MyelinToNetdev, "to-netdev", progCase{name: "A's next new flow",
		in: ipv4(protoTCP, podA, extHost).build(), verdict: tcActShot, reason: "DROP_NAT_BUDGET"}); err != nil {
		t.Errorf("A's new flow after the adopted round: %v", err)
	}
	// The next agent turns the budget off, while an adopted round that ran during its
	// Load wrote the old one back: the loaded datapath's round clears it.
	cfg.PinDir, cfg.NATPodMax = running.cfg.PinDir, 0
	off, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if err := adopted.natBudget().setState(true); err != nil {
		t.Fatal(err)
	}
	if _, err := off.GCNAT(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	again, err := OpenPinned(running.cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.cfg.NATPodMax != 0 {
		t.Errorf("a later adoption's NAT budget = %d after the budget was turned off, want 0", again.cfg.NATPodMax)
	}
}

// The masquerade and Service budgets' lists are pinned and a new Load sets their
// switches in myelin_budgets from them: a restarted agent keeps a pod that was over
// its budget out before its first GC round.
func TestPrivilegedBPFBudgetsSurviveALoad(t *testing.T) {
	requirePrivileged(t)
	cfg := Config{HostRouting: HostRoutingBPF, Masquerade: true, LoadBalancing: true, NodeIP: testNodeIP,
		ClusterCIDR: lbClusterCIDR, NATPortMin: testNATPort, NATPortMax: testNATPort, NATPodMax: 5, LBCTPodMax: 5}
	d := loadTestConfig(t, cfg)
	a, n := networkUint32(mustAddr(podA)), uint32(9)
	for _, m := range []*ebpf.Map{d.objs.MyelinSnatOver, d.objs.MyelinLbCtOver} {
		if err := m.Put(&a, &n); err != nil {
			t.Fatal(err)
		}
	}
	cfg.PinDir = d.cfg.PinDir
	again, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.SetNoMasquerade(testNoMasq); err != nil {
		t.Fatal(err)
	}
	if err := seedLB(again, *oneService(feTCP, Service{ID: 1, Backends: []uint32{1}})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prog *ebpf.Program
		dir  string
		c    progCase
	}{
		{again.objs.MyelinToNetdev, "to-netdev", progCase{name: "A's new flow out", in: ipv4(protoTCP, podA, extHost).build(),
			verdict: tcActShot, reason: "DROP_NAT_BUDGET"}},
		{again.objs.MyelinFromPod, "from-pod", progCase{name: "A's new Service flow", endpoints: seedB,
			in: ipv4(protoTCP, podA, vip).withDst(vip, 80).build(), verdict: tcActShot, reason: "DROP_SVC_CT_BUDGET"}},
	} {
		if err := checkCase(again, c.prog, c.dir, c.c); err != nil {
			t.Errorf("%s after a new Load: %v", c.c.name, err)
		}
	}
}
