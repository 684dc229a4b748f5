package datapath

import "testing"

// Distinct Maglev tables stay within maglevTablesBytes: a table another service
// holds is always admitted (shared), a new one only while the bound holds, and a
// service replacing the table it held alone frees its place.
func TestMaglevTablesAdmits(t *testing.T) {
	const size = 16381
	table := func(fill uint32) []uint32 {
		tb := make([]uint32, size)
		for i := range tb {
			tb[i] = fill
		}
		return tb
	}
	limit := maglevTablesBytes / (4 * size)
	var tabs maglevTables
	tabs.byHash = map[[32]byte]*maglevTable{}
	tabs.bySvc = map[uint32]*maglevTable{}
	for i := range limit { // what attach records, without the kernel's maps
		tab := &maglevTable{hash: hashTable(table(uint32(i))), refs: 1}
		tabs.byHash[tab.hash], tabs.bySvc[uint32(i)] = tab, tab
	}
	if !tabs.admits(9999, hashTable(table(0)), size) {
		t.Error("a table another service holds was refused: it costs nothing more")
	}
	if tabs.admits(9999, hashTable(table(uint32(limit))), size) {
		t.Errorf("a new table past %d distinct ones was admitted", limit)
	}
	if !tabs.admits(0, hashTable(table(uint32(limit))), size) {
		t.Error("service 0 replacing the table it holds alone was refused")
	}
}
