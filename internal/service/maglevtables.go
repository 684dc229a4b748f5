package service

import (
	"slices"
	"strings"

	"github.com/myelin-net/myelin/internal/maglev"
)

// maglevCacheBytes bounds the Manager's cache of Maglev tables: 8 MiB is 128 tables of
// the default 16381 entries. Services over the same pods share a table, so a few
// distinct backend sets cover most clusters; beyond the bound tables are recomputed.
const maglevCacheBytes = 8 << 20

// maglevTable returns the Maglev table of active as indexes into it, nil with random
// selection. The table is built from the backends' identities (addr:port) in sorted
// order, never from ids or the order given, so every node computes the same one
// whatever its id history; only then are its entries mapped to indexes of active.
// Tables are cached by backend names: 10,000 Services over the same pods compute one.
func (m *Manager) maglevTable(active []Backend) ([]int32, error) {
	if m.maglevSize == 0 || len(active) == 0 || len(active) >= m.maglevSize {
		// None, or more backends than the table has entries (a Maglev table
		// needs fewer): random selection, never a frontend left unwritten.
		return nil, nil
	}
	sorted := slices.Clone(active)
	sortBackends(sorted)
	names := make([]string, len(sorted))
	for i, b := range sorted {
		names[i] = b.String()
	}
	key := strings.Join(names, ",")
	t, ok := m.tables[key]
	if !ok {
		full, err := maglev.Table(names, m.maglevSize)
		if err != nil {
			return nil, err
		}
		t = make([]int32, len(full))
		for i, idx := range full {
			t[i] = int32(idx)
		}
		m.cacheTable(key, t)
	}
	if slices.Equal(sorted, active) {
		return t, nil // the usual case: Desired sorts backends
	}
	pos := make(map[Backend]int, len(active))
	for i, b := range active {
		pos[b] = i
	}
	out := make([]int32, len(t))
	for i, idx := range t {
		out[i] = int32(pos[sorted[idx]])
	}
	return out, nil
}

// cacheTable keeps table t under key while the cache stays within maglevCacheBytes;
// a full cache is emptied first (distinct backend sets beyond it are recomputed).
func (m *Manager) cacheTable(key string, t []int32) {
	size := 4*len(t) + len(key)
	if size > maglevCacheBytes {
		return
	}
	if m.tableSize+size > maglevCacheBytes {
		clear(m.tables)
		m.tableSize = 0
	}
	m.tables[key] = t
	m.tableSize += size
}
