package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
)

// policy-ct-max sizes myelin_policy_ct (Config.PolicyCTMax; 0 keeps the object's
// size). A reload with the same size keeps the tracked connections; a changed size
// replaces the pinned map and places them in the new one's buckets (before, they
// were dropped and an established connection whose replies the policy does not
// allow by themselves was cut); shrunk below them, it keeps as many as fit and
// counts the rest as lost.
func TestPrivilegedPolicyCTMax(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDir(t)
	defer Unpin(dir)
	load := func(max uint32) *Datapath {
		t.Helper()
		d := loadPolicyCTMax(t, dir, max)
		if slots := int(d.objs.MyelinPolicyCt.MaxEntries()-1) * policyCTWays; max != 0 && slots != int(max) {
			t.Errorf("PolicyCTMax %d: myelin_policy_ct holds %d slots", max, slots)
		}
		return d
	}
	tracked := func(d *Datapath) int { return len(policyCTEntries(d)) }
	d := load(0)
	if got, want := int(d.objs.MyelinPolicyCt.MaxEntries()), objectMapSize(t, "myelin_policy_ct"); got != want {
		t.Errorf("default: myelin_policy_ct holds %d, want the object's %d", got, want)
	}
	d.Close()

	d = load(4096)
	seedBAllowsA8080(t, d)
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
	if n := tracked(d); n != 1 {
		t.Errorf("reload with another size: %d tracked connections, want the 1 carried over", n)
	}
	if r := d.ReplacedMaps(); len(r) != 1 || r[0].Name != "myelin_policy_ct" || !r[0].Carrying() || r[0].Carried != 1 || r[0].Lost != 0 {
		t.Errorf("reload with another size: replaced %+v, want myelin_policy_ct with 1 carried, 0 lost", r)
	}
	// 40 more connections, then a size of 16 (4 buckets): at most 16 are
	// carried, the rest lost (each bucket keeps the first 4 placed in it).
	for i := uint32(0); tracked(d) < 41; i++ {
		k := myelinPolicyCtKey{AddrLo: 0x0a000001, AddrHi: 0x0a000002 + i, PortLo: 80, PortHi: 40000, Proto: 6}
		_ = policyCTPut(d, k, myelinPolicyCtEntry{Ends: policyCTEndLo}) // a full bucket: the next
	}
	d.Close()
	d = load(16)
	defer d.Close()
	if r := d.ReplacedMaps(); len(r) != 1 || r[0].Carried < 1 || r[0].Carried > 16 || r[0].Carried+r[0].Lost != 41 || r[0].CarryErr != "" {
		t.Errorf("reload shrunk to 16 below 41 tracked connections: replaced %+v, want 1-16 carried, the rest of 41 lost", r)
	}
	if n := tracked(d); n == 0 || n > 16 {
		t.Errorf("reload shrunk to 16: %d tracked connections, want 1-16", n)
	}
}

// loadPolicyCTMax loads a datapath pinned in dir whose policy table holds max
// connections (0: the object's size).
func loadPolicyCTMax(t *testing.T, dir string, max uint32) *Datapath {
	t.Helper()
	d, err := Load(Config{PinDir: dir, HostRouting: HostRoutingLegacy, NodeIP: testNodeIP, PolicyCTMax: max})
	if err != nil {
		t.Fatalf("load with PolicyCTMax %d: %v", max, err)
	}
	return d
}
