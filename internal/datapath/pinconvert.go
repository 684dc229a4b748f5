package datapath

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// A pinned map whose value layout changed (a release added, removed or moved a
// field) is replaced by Load. Its entries are converted into the new layout by field
// name, as the pinned map's BTF and the new object's describe them: a field of the
// same name and type keeps its bytes, a new field starts zero, a dropped one is left
// behind. A field whose meaning changes must get a new name (TestPinnedMapLayouts
// says so when a layout changes). Keys are never converted: a moved key field would
// change what an LPM trie's prefix covers, a dropped one would merge entries. Layouts
// this can't map (a changed key, a field whose type changed, nested types that
// differ, bit fields, anonymous members, a map without BTF) leave the replacement
// empty, as before.

// fieldCopy copies n bytes at from in an entry of the old layout to to in the new.
type fieldCopy struct{ from, to, n int }

// layoutConv rewrites a pinned map's values into the replacement's layout; keys,
// unchanged (planLayout), pass as they are.
type layoutConv struct {
	value     []fieldCopy
	valueSize int // the new layout's
}

// convert returns the key as it is, padding included (a lookup must find the same
// bytes), and the value of the old layout in a newly allocated slice of the new one.
func (c *layoutConv) convert(key, value []byte) ([]byte, []byte) {
	return key, applyCopies(c.value, value, c.valueSize)
}

func applyCopies(plan []fieldCopy, from []byte, size int) []byte {
	to := make([]byte, size)
	for _, f := range plan {
		copy(to[f.to:f.to+f.n], from[f.from:f.from+f.n])
	}
	return to
}

// planLayout says how entries of the pinned map's types (fromKey, fromValue) become
// entries of ms's, or why they can't. identity: nothing moves, the bytes are copied
// as they are.
// ms must have BTF for its key and value (carryPlan checks).
func planLayout(fromKey, fromValue btf.Type, ms *ebpf.MapSpec) (conv *layoutConv, identity bool, err error) {
	if !sameShape(fromKey, ms.Key) {
		return nil, false, fmt.Errorf("key: its layout changed (%s to %s); keys are not converted", fromKey.TypeName(), ms.Key.TypeName())
	}
	value, valueID, err := planType(fromValue, ms.Value)
	if err != nil {
		return nil, false, fmt.Errorf("value: %w", err)
	}
	return &layoutConv{value: value, valueSize: int(ms.ValueSize)}, valueID, nil
}

// planType maps a type of the old layout onto the new: struct members by name, any
// other type whole when its size is the same. identity: every byte stays where it was.
func planType(from, to btf.Type) (plan []fieldCopy, identity bool, err error) {
	from, to = btf.UnderlyingType(from), btf.UnderlyingType(to)
	fromSize, err := btf.Sizeof(from)
	if err != nil {
		return nil, false, err
	}
	toSize, err := btf.Sizeof(to)
	if err != nil {
		return nil, false, err
	}
	fs, fok := from.(*btf.Struct)
	ts, tok := to.(*btf.Struct)
	if !fok || !tok {
		if fok != tok || fromSize != toSize || !sameShape(from, to) {
			return nil, false, fmt.Errorf("%s (%d bytes) became %s (%d bytes)", from.TypeName(), fromSize, to.TypeName(), toSize)
		}
		return []fieldCopy{{0, 0, toSize}}, true, nil
	}
	old := map[string]btf.Member{}
	for _, m := range fs.Members {
		if err := plainMember(fs, m); err != nil {
			return nil, false, err
		}
		old[m.Name] = m
	}
	identity = fromSize == toSize && len(fs.Members) == len(ts.Members)
	for _, m := range ts.Members {
		if err := plainMember(ts, m); err != nil {
			return nil, false, err
		}
		o, ok := old[m.Name]
		if !ok {
			identity = false // a new field: zero
			continue
		}
		n, err := btf.Sizeof(m.Type)
		if err != nil {
			return nil, false, err
		}
		if on, err := btf.Sizeof(o.Type); err != nil || on != n {
			return nil, false, fmt.Errorf("field %s.%s changed size (%d to %d bytes): give it a new name", ts.Name, m.Name, on, n)
		}
		if !sameShape(o.Type, m.Type) {
			return nil, false, fmt.Errorf("field %s.%s changed type (%s to %s): give it a new name", ts.Name, m.Name, o.Type.TypeName(), m.Type.TypeName())
		}
		if o.Offset != m.Offset {
			identity = false
		}
		plan = append(plan, fieldCopy{from: int(o.Offset.Bytes()), to: int(m.Offset.Bytes()), n: n})
	}
	return plan, identity, nil
}

// sameShape says whether a and b lay their bytes out alike: the same kind and size,
// arrays of as many elements alike, structs and unions whose members have the same
// names, offsets and shapes. A field whose type is a struct is copied whole, so a
// change inside it must not go unnoticed.
func sameShape(a, b btf.Type) bool {
	a, b = btf.UnderlyingType(a), btf.UnderlyingType(b)
	as, aerr := btf.Sizeof(a)
	bs, berr := btf.Sizeof(b)
	if aerr != nil || berr != nil || as != bs {
		return false
	}
	switch a := a.(type) {
	case *btf.Int:
		b, ok := b.(*btf.Int)
		return ok && a.Encoding == b.Encoding
	case *btf.Enum:
		b, ok := b.(*btf.Enum)
		return ok && a.Signed == b.Signed && slices.Equal(a.Values, b.Values)
	case *btf.Array:
		b, ok := b.(*btf.Array)
		return ok && a.Nelems == b.Nelems && sameShape(a.Type, b.Type)
	case *btf.Struct:
		b, ok := b.(*btf.Struct)
		return ok && sameMembers(a.Members, b.Members)
	case *btf.Union:
		b, ok := b.(*btf.Union)
		return ok && sameMembers(a.Members, b.Members)
	}
	return false
}

func sameMembers(a, b []btf.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Offset != b[i].Offset || a[i].BitfieldSize != b[i].BitfieldSize || !sameShape(a[i].Type, b[i].Type) {
			return false
		}
	}
	return true
}

// plainMember refuses the members planType can't map by name.
func plainMember(s *btf.Struct, m btf.Member) error {
	switch {
	case m.Name == "":
		return fmt.Errorf("struct %s has an anonymous member", s.Name)
	case m.BitfieldSize != 0 || m.Offset%8 != 0:
		return fmt.Errorf("field %s.%s is a bit field", s.Name, m.Name)
	}
	return nil
}

// pinnedTypes returns the BTF key and value types the pinned map m was created
// with (errors when it has none).
func pinnedTypes(m *ebpf.Map) (key, value btf.Type, err error) {
	info, err := mapBTFInfo(m.FD())
	if err != nil {
		return nil, nil, err
	}
	if info.btfID == 0 || info.keyTypeID == 0 || info.valueTypeID == 0 {
		return nil, nil, fmt.Errorf("the pinned map has no BTF for its key and value")
	}
	h, err := btf.NewHandleFromID(btf.ID(info.btfID))
	if err != nil {
		return nil, nil, fmt.Errorf("open the pinned map's BTF: %w", err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read the pinned map's BTF: %w", err)
	}
	if key, err = spec.TypeByID(btf.TypeID(info.keyTypeID)); err != nil {
		return nil, nil, fmt.Errorf("the pinned map's key type: %w", err)
	}
	if value, err = spec.TypeByID(btf.TypeID(info.valueTypeID)); err != nil {
		return nil, nil, fmt.Errorf("the pinned map's value type: %w", err)
	}
	return key, value, nil
}

// mapBTF is what BPF_OBJ_GET_INFO_BY_FD says of a map's BTF (cilium/ebpf's MapInfo
// has the BTF object's id, not the key and value type ids).
type mapBTF struct{ btfID, keyTypeID, valueTypeID uint32 }

// bpfMapInfo is struct bpf_map_info up to map_extra (linux/bpf.h); the kernel fills
// what it knows of it and refuses a longer struct only if its tail is not zero.
type bpfMapInfo struct {
	typ, id, keySize, valueSize, maxEntries, mapFlags uint32
	name                                              [16]byte
	ifindex, btfVmlinuxValueTypeID                    uint32
	netnsDev, netnsIno                                uint64
	btfID, btfKeyTypeID, btfValueTypeID, btfVmlinuxID uint32
	mapExtra                                          uint64
}

const bpfObjGetInfoByFD = 15 // BPF_OBJ_GET_INFO_BY_FD

func mapBTFInfo(fd int) (mapBTF, error) {
	var info bpfMapInfo
	attr := struct {
		fd, infoLen uint32
		info        uint64
	}{uint32(fd), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&info)
	if errno != 0 {
		return mapBTF{}, fmt.Errorf("read the pinned map's info: %w", errno)
	}
	return mapBTF{btfID: info.btfID, keyTypeID: info.btfKeyTypeID, valueTypeID: info.btfValueTypeID}, nil
}
