package datapath

import "testing"

// The agent's copy of the ipcache's size is the compiled map's (no root needed:
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
}
