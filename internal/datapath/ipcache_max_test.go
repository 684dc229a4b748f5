package datapath

import "testing"

// The agent's copies of the ipcache's and the policy map's sizes are the compiled maps' (no root needed:
// only the object file is read).
func TestIPCacheMax(t *testing.T) {
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := spec.Maps["myelin_ipcache"]
	if !ok {
		t.Fatal("the object has no myelin_ipcache")
	}
	if m.MaxEntries != IPCacheMax {
		t.Errorf("myelin_ipcache holds %d prefixes, IPCacheMax says %d (bpf/lib/maps.h IPCACHE_MAX)", m.MaxEntries, IPCacheMax)
	}
	if m := spec.Maps["myelin_policy"]; m == nil || m.MaxEntries != PolicyMax {
		t.Errorf("myelin_policy: %v, want %d entries as PolicyMax says (bpf/lib/maps.h POLICY_MAX)", m, PolicyMax)
	}
}
