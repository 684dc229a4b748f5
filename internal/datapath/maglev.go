package datapath

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// maglevTables deduplicates the Maglev tables of myelin_lb_maglev: one inner
// map per distinct table content, shared by every service whose table is
// identical (services selecting the same pods on the same port get the same
// backend ids, hence the same table), with a reference count. The state is
// in memory only: after an agent restart the outer map still points at the
// previous agent's inner maps, which UpsertService overwrites with fresh ones;
// the kernel frees an inner map once no outer entry and no fd refers to it.
type maglevTables struct {
	mu     sync.Mutex
	byHash map[[sha256.Size]byte]*maglevTable
	bySvc  map[uint32]*maglevTable
}

// maglevTable is one inner map and the services using it.
type maglevTable struct {
	m    *ebpf.Map
	hash [sha256.Size]byte
	refs int
}

// attach points service svcID's outer entry at the inner map holding
// table (h: its hashTable), creating and filling it unless another service
// has the same table.
func (t *maglevTables) attach(outer *ebpf.Map, svcID uint32, table []uint32, h [sha256.Size]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.bySvc[svcID]
	if cur != nil && cur.hash == h {
		return nil
	}
	tab := t.byHash[h]
	if tab == nil {
		m, err := newMaglevMap(table)
		if err != nil {
			return err
		}
		tab = &maglevTable{m: m, hash: h}
	}
	if err := outer.Update(svcID, tab.m, ebpf.UpdateAny); err != nil {
		if tab.refs == 0 {
			tab.m.Close()
		}
		return fmt.Errorf("point service id %d at its Maglev table: %w", svcID, err)
	}
	if t.byHash == nil {
		t.byHash = make(map[[sha256.Size]byte]*maglevTable)
		t.bySvc = make(map[uint32]*maglevTable)
	}
	t.byHash[h] = tab
	tab.refs++
	t.bySvc[svcID] = tab
	if cur != nil {
		t.release(cur)
	}
	return nil
}

// detach removes service svcID's outer entry, if any, and drops its reference.
func (t *maglevTables) detach(outer *ebpf.Map, svcID uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := outer.Delete(svcID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete Maglev table of service id %d: %w", svcID, err)
	}
	if cur := t.bySvc[svcID]; cur != nil {
		delete(t.bySvc, svcID)
		t.release(cur)
	}
	return nil
}

// maglevTablesBytes bounds the kernel memory of the node's distinct Maglev tables
// (4 × maglev-table-size bytes each, and an fd of the agent's): 4,096 tables at the
// default size. Services of many ports each selecting other target ports never
// share a table, and a Service author could make tens of thousands (GBs of kernel
// memory per node); a service whose table would be past the bound selects at random
// (admits).
const maglevTablesBytes = 256 << 20

// admits says whether service svcID may have a table of entries whose hashTable is
// h: another service holds the same content (shared), or one more distinct table
// stays within maglevTablesBytes (counting the one svcID lets go, if it held it
// alone).
func (t *maglevTables) admits(svcID uint32, h [sha256.Size]byte, entries int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byHash[h] != nil {
		return true
	}
	n := len(t.byHash)
	if cur := t.bySvc[svcID]; cur != nil && cur.refs == 1 {
		n--
	}
	return (n+1)*4*entries <= maglevTablesBytes
}

// release drops one reference to tab, closing its fd with the last one.
func (t *maglevTables) release(tab *maglevTable) {
	tab.refs--
	if tab.refs > 0 {
		return
	}
	delete(t.byHash, tab.hash)
	tab.m.Close()
}

// count returns the number of distinct inner maps held.
func (t *maglevTables) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byHash)
}

// close closes every inner map fd; outer entries keep the maps alive.
func (t *maglevTables) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tab := range t.byHash {
		tab.m.Close()
	}
	t.byHash, t.bySvc = nil, nil
}

// newMaglevMap creates an inner map holding table, written in one batch.
// Its flags must equal the template's (myelin_lb_maglev_inner): with
// BPF_F_INNER_MAP the kernel accepts any size.
func newMaglevMap(table []uint32) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "myelin_maglev",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(len(table)),
		Flags:      unix.BPF_F_INNER_MAP,
	})
	if err != nil {
		return nil, fmt.Errorf("create Maglev table: %w", err)
	}
	keys := make([]uint32, len(table))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(keys, table, nil); err != nil {
		m.Close()
		return nil, fmt.Errorf("fill Maglev table: %w", err)
	}
	return m, nil
}

// hashTable identifies a table by its content.
func hashTable(table []uint32) [sha256.Size]byte {
	b := make([]byte, 4*len(table))
	for i, id := range table {
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
	return sha256.Sum256(b)
}
