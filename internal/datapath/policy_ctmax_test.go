package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
)

// policy-ct-max sizes myelin_policy_ct (Config.PolicyCTMax; 0 keeps the object's
// size). A reload with the same size keeps the tracked connections; a changed size
// replaces the pinned map, so they are judged again by their next packet.
func TestPrivilegedPolicyCTMax(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	load := func(max uint32) *Datapath {
		t.Helper()
		d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTMax: max})
		if err != nil {
			t.Fatalf("load with PolicyCTMax %d: %v", max, err)
		}
		if max != 0 && d.objs.MyelinPolicyCt.MaxEntries() != max {
			t.Errorf("PolicyCTMax %d: myelin_policy_ct holds %d", max, d.objs.MyelinPolicyCt.MaxEntries())
		}
		return d
	}
	tracked := func(d *Datapath) int {
		t.Helper()
		n, err := countEntries(d.objs.MyelinPolicyCt, new(myelinPolicyCtKey), new(myelinPolicyCtEntry))
		if err != nil {
			t.Fatalf("count tracked connections: %v", err)
		}
		return n
	}
	d := load(0)
	if got, want := int(d.objs.MyelinPolicyCt.MaxEntries()), objectMapSize(t, "myelin_policy_ct"); got != want {
		t.Errorf("default: myelin_policy_ct holds %d, want the object's %d", got, want)
	}
	d.Close()

	d = load(4096)
	st := policyState{flags: map[string]PolicyFlags{podBIP: PolicyIngress},
		entries: map[PolicyKey][]PolicyPort{ingressOf(podBIP, idA): {tcpPort(8080)}}}
	if err := seedPolicy(d, st); err != nil {
		t.Fatal(err)
	}
	if err := seedEndpoints(d, seedAB); err != nil {
		t.Fatal(err)
	}
	syn := ipv4(protoTCP, podA, podBIP).withSrc(podA, 3003).withDst(podBIP, 8080).withTCPFlags(0x02)
	if ret, err := d.objs.MyelinToPod.Run(&ebpf.RunOptions{Data: syn.build()}); err != nil || ret != tcActOK {
		t.Fatalf("allowed SYN: verdict %d, err %v", ret, err)
	}
	if n := tracked(d); n != 1 {
		t.Fatalf("after the SYN: %d tracked connections, want 1", n)
	}
	d.Close()

	d = load(4096)
	if n := tracked(d); n != 1 {
		t.Errorf("reload with the same size: %d tracked connections, want the 1 kept", n)
	}
	d.Close()
	d = load(8192)
	defer d.Close()
	if n := tracked(d); n != 0 {
		t.Errorf("reload with another size: %d tracked connections, want a new, empty map", n)
	}
}
