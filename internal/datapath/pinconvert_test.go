package datapath

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

var (
	u16 = &btf.Int{Name: "__u16", Size: 2}
	u32 = &btf.Int{Name: "__u32", Size: 4}
	u64 = &btf.Int{Name: "__u64", Size: 8}
)

// member is a named member at byte offset off.
func member(name string, typ btf.Type, off int) btf.Member {
	return btf.Member{Name: name, Type: typ, Offset: btf.Bits(off * 8)}
}

func le32(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// Entries move by field name: a kept field keeps its bytes wherever it now is, a new
// one is zero, a dropped one is left behind; layouts that can't be mapped by name are
// refused with what changed.
func TestPlanType(t *testing.T) {
	old := &btf.Struct{Name: "entry", Size: 12, Members: []btf.Member{member("fin_hi", u32, 0), member("ends", u32, 4), member("gone", u32, 8)}}
	now := &btf.Struct{Name: "entry", Size: 16, Members: []btf.Member{member("ends", u32, 0), member("closing", u32, 4), member("fin_lo", u32, 8), member("fin_hi", u32, 12)}}
	plan, identity, err := planType(old, now)
	if err != nil || identity {
		t.Fatalf("reordered struct: identity %v, err %v; want a conversion", identity, err)
	}
	if got, want := applyCopies(plan, le32(7, 3, 9), 16), le32(3, 0, 0, 7); !bytes.Equal(got, want) {
		t.Errorf("converted %x, want %x (ends and fin_hi kept, closing and fin_lo zero, gone dropped)", got, want)
	}
	if _, identity, err := planType(now, now); err != nil || !identity {
		t.Errorf("same struct: identity %v, err %v; want identity", identity, err)
	}
	if _, identity, err := planType(&btf.Typedef{Name: "k", Type: u32}, u32); err != nil || !identity {
		t.Errorf("typedef of the same int: identity %v, err %v; want identity", identity, err)
	}
	for _, c := range []struct {
		from, to btf.Type
		want     string
	}{
		{&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("ends", u32, 0)}},
			&btf.Struct{Name: "e", Size: 8, Members: []btf.Member{member("ends", u64, 0)}}, "field e.ends changed size (4 to 8 bytes)"},
		{u32, u64, "__u32 (4 bytes) became __u64 (8 bytes)"},
		{u32, &btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("a", u32, 0)}}, "became e"},
		{&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{{Name: "a", Type: u32, BitfieldSize: 3}}}, now, "field e.a is a bit field"},
		{&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("", &btf.Union{Size: 4, Members: []btf.Member{member("x", u32, 0)}}, 0)}}, now, "anonymous member"},
		{&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("a", u32, 0)}},
			&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("a", &btf.Array{Type: u16, Index: u32, Nelems: 2}, 0)}}, "field e.a changed type"},
		{&btf.Struct{Name: "e", Size: 8, Members: []btf.Member{member("fe", pair("x", "y"), 0)}},
			&btf.Struct{Name: "e", Size: 8, Members: []btf.Member{member("fe", pair("y", "x"), 0)}}, "field e.fe changed type"},
		{&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("st", &btf.Enum{Name: "st", Size: 4, Values: []btf.EnumValue{{Name: "OPEN", Value: 1}}}, 0)}},
			&btf.Struct{Name: "e", Size: 4, Members: []btf.Member{member("st", &btf.Enum{Name: "st", Size: 4, Values: []btf.EnumValue{{Name: "OPEN", Value: 2}}}, 0)}}, "field e.st changed type"},
	} {
		if _, _, err := planType(c.from, c.to); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("planType(%v, %v): err %v, want %q", c.from, c.to, err, c.want)
		}
	}
}

// pair is a struct of two __u32 named first and second.
func pair(first, second string) *btf.Struct {
	return &btf.Struct{Name: "pair", Size: 8, Members: []btf.Member{member(first, u32, 0), member(second, u32, 4)}}
}

// Keys are never converted: a key whose layout changed (here an LPM key's address
// moved behind a new field, which would change what its prefix covers) refuses the
// whole map; values are.
func TestPlanLayoutKeepsKeys(t *testing.T) {
	lpm := &btf.Struct{Name: "k", Size: 8, Members: []btf.Member{member("prefixlen", u32, 0), member("addr", u32, 4)}}
	moved := &btf.Struct{Name: "k", Size: 12, Members: []btf.Member{member("prefixlen", u32, 0), member("zone", u32, 4), member("addr", u32, 8)}}
	value := pair("a", "b")
	ms := &ebpf.MapSpec{KeySize: 12, ValueSize: 8, Key: moved, Value: value}
	if _, _, err := planLayout(lpm, value, ms); err == nil || !strings.Contains(err.Error(), "keys are not converted") {
		t.Errorf("a changed key: err %v, want it refused", err)
	}
	padded := &btf.Struct{Name: "k", Size: 8, Members: []btf.Member{member("port", u16, 0), member("addr", u32, 4)}}
	ms = &ebpf.MapSpec{KeySize: 8, ValueSize: 8, Key: padded, Value: pair("b", "a")}
	conv, identity, err := planLayout(padded, value, ms)
	if err != nil || identity || conv == nil {
		t.Fatalf("the same key, a changed value: conv %v, identity %v, err %v; want a conversion", conv, identity, err)
	}
	// The key is copied whole, its padding too: the programs look it up by its bytes.
	key := []byte{1, 2, 0xee, 0xee, 3, 4, 5, 6}
	if got, _ := conv.convert(key, le32(7, 8)); !bytes.Equal(got, key) {
		t.Errorf("key converted to %x, want %x as it was", got, key)
	}
}

// A pinned map whose value layout changed (a release reordered, added and dropped
// fields) is replaced with its entries converted by field name, so connections it
// tracked stay tracked; the key, whose layout is the same, is copied as it is. Here
// the connection table of a release before 2026-12-05, an LRU hash, whose
// connections are placed into the buckets of today's table.
func TestPrivilegedLoadConvertsAChangedLayout(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDirReady(t)
	defer Unpin(dir)
	keyType, _ := lruPolicyCTTypes(t)
	oldValue := &btf.Struct{Name: "policy_ct_entry", Size: 12, Members: []btf.Member{
		member("fin_hi", u32, 0), member("ends", u32, 4), member("dropped", u32, 8)}}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "myelin_policy_ct", Type: ebpf.LRUHash, KeySize: keyType.Size, ValueSize: 12,
		MaxEntries: 64, Key: keyType, Value: oldValue})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	key := myelinPolicyCtKey{AddrLo: 0x0a000001, AddrHi: 0x0a000002, PortLo: 80, PortHi: 3003, Proto: protoTCP}
	d := loadOverPinned(t, dir, "myelin_policy_ct", old, &key, le32(7, 3, 99))
	defer d.Close()
	r := d.ReplacedMaps()
	if len(r) != 1 || r[0].Name != "myelin_policy_ct" || !r[0].Converted() || r[0].Carried != 1 || r[0].Lost != 0 {
		t.Fatalf("load over a myelin_policy_ct of another value layout: replaced %+v, want it converted, 1 carried", r)
	}
	got, ok := policyCTGet(d, key)
	if !ok {
		t.Fatal("the tracked connection is not tracked after the conversion")
	}
	if want := (myelinPolicyCtEntry{Ends: 3, FinHi: 7}); got != want {
		t.Errorf("converted entry %+v, want %+v (ends and fin_hi kept, closing and fin_lo zero)", got, want)
	}
}

// Every pinned map's key and value map onto themselves by field name: a size change
// (a table size in the configuration) copies their entries as they are, and a later
// release's layout change can be converted.
func TestPinnedMapsPlanByName(t *testing.T) {
	tc, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	sock, err := loadSock()
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []*ebpf.CollectionSpec{tc, sock} {
		for name, ms := range spec.Maps {
			if ms.Pinning != ebpf.PinByName || ms.Key == nil || ms.Value == nil {
				continue
			}
			if _, identity, err := planLayout(ms.Key, ms.Value, ms); err != nil || !identity {
				t.Errorf("%s onto itself: identity %v, err %v", name, identity, err)
			}
		}
	}
}

// A change the BTF shows and the conversion can't follow leaves the replacement empty
// even with the same sizes (here a key whose fields moved: copied as it was, its
// entries would be looked up under other tuples).
func TestPrivilegedLoadRefusesAMovedKey(t *testing.T) {
	requirePrivileged(t)
	dir := testPinDirReady(t)
	defer Unpin(dir)
	nk, entry := lruPolicyCTTypes(t)
	moved := &btf.Struct{Name: nk.Name, Size: nk.Size, Members: append([]btf.Member(nil), nk.Members...)}
	moved.Members[0].Name, moved.Members[1].Name = moved.Members[1].Name, moved.Members[0].Name // addr_lo, addr_hi swapped
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "myelin_policy_ct", Type: ebpf.LRUHash, KeySize: nk.Size, ValueSize: entry.Size,
		MaxEntries: 64, Key: moved, Value: entry})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	key := myelinPolicyCtKey{AddrLo: 0x0a000001, AddrHi: 0x0a000002, PortLo: 80, PortHi: 3003, Proto: protoTCP}
	d := loadOverPinned(t, dir, "myelin_policy_ct", old, &key, &myelinPolicyCtEntry{Ends: 1})
	defer d.Close()
	r := d.ReplacedMaps()
	if len(r) != 1 || r[0].Carrying() || !strings.Contains(r[0].ConvertErr, "keys are not converted") {
		t.Errorf("load over a myelin_policy_ct whose key fields moved: replaced %+v, want nothing carried, the key named", r)
	}
}
