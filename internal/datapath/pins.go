package datapath

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
)

// loadPinned loads spec into objs, reusing the maps pinned in pinDir. It
// returns the names of the pinned maps it created (none was pinned, or the
// pinned one no longer matched) and the pinned maps it replaced. A replaced map
// whose entries keep their layout (only its size or flags changed) gets them
// copied into its replacement (carryEntries). A pin is replaced only once the
// whole load has succeeded: a failed Load leaves every pin as it was, still
// serving the programs attached.
func loadPinned(spec *ebpf.CollectionSpec, pinDir string, objs *myelinObjects) ([]string, []MapReplacement, error) {
	created, replaced, err := findIncompatiblePins(spec, pinDir)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range replaced {
		spec.Maps[r.Name].Pinning = ebpf.PinNone // created unpinned; pinned by swapPins
	}
	coll, err := loadConcurrently(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinDir}})
	if err != nil {
		return nil, nil, fmt.Errorf("load datapath objects: %w", err)
	}
	defer coll.Close() // what objs did not take
	for i, r := range replaced {
		if !r.carry {
			continue
		}
		carry := carryEntries
		if r.Name == "myelin_policy_ct" {
			carry = func(r MapReplacement, path string, to *ebpf.Map) (MapReplacement, error) {
				var seed uint64
				if err := spec.Variables["policy_ct_seed"].Get(&seed); err != nil {
					return r, fmt.Errorf("read policy_ct_seed: %w", err)
				}
				return policyCTCarry(r, path, to, seed)
			}
		}
		if replaced[i], err = carry(r, filepath.Join(pinDir, r.Name), coll.Maps[r.Name]); err != nil {
			return nil, nil, err
		}
	}
	if err := swapPins(coll, replaced, pinDir); err != nil {
		return nil, nil, err
	}
	if err := coll.Assign(objs); err != nil {
		return nil, nil, fmt.Errorf("assign datapath objects: %w", err)
	}
	if err := removeDroppedPins(spec, pinDir); err != nil {
		objs.Close()
		return nil, nil, err
	}
	return created, replaced, nil
}

// carryEntries copies the entries of the pinned map at path into to, its
// replacement, and returns r with what was carried and what did not fit. The
// pinned map still serves the programs attached: an entry they write or delete
// meanwhile may be missed (a flow's next packet creates it again). Entries of a
// changed layout are converted by field name (r.conv). Only the
// endpoints map must arrive whole (checkPinned refused a size below its
// entries); any other is copied up to its new size, the rest counted as lost.
func carryEntries(r MapReplacement, path string, to *ebpf.Map) (MapReplacement, error) {
	from, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return r, fmt.Errorf("open pinned map %s to carry its entries: %w", path, err)
	}
	defer from.Close()
	key, value := make([]byte, from.KeySize()), make([]byte, from.ValueSize())
	it := from.Iterate()
	for it.Next(key, value) {
		if r.Carried >= int(to.MaxEntries()) {
			r.Lost++
			continue
		}
		k, v := key, value
		if r.conv != nil {
			k, v = r.conv.convert(key, value)
		}
		if err := to.Update(k, v, ebpf.UpdateAny); err != nil {
			if r.Name == "myelin_endpoints" {
				return r, fmt.Errorf("carry endpoint %x into the replacement of %s: %w", key, path, err)
			}
			r.Lost++
			continue
		}
		r.Carried++
	}
	if err := it.Err(); err != nil {
		if r.Name == "myelin_endpoints" {
			return r, fmt.Errorf("read the endpoints of %s to carry them: %w", path, err)
		}
		r.CarryErr = err.Error() // what was copied stays
	}
	return r, nil
}

// swapPins pins the maps of coll created for the replaced pins in their place.
func swapPins(coll *ebpf.Collection, replaced []MapReplacement, pinDir string) error {
	for _, r := range replaced {
		path := filepath.Join(pinDir, r.Name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpin replaced map %s: %w", path, err)
		}
		if err := coll.Maps[r.Name].Pin(path); err != nil {
			return fmt.Errorf("pin replacement map %s: %w", path, err)
		}
	}
	return nil
}

// removeDroppedPins unpins the maps in pinDir named myelin_* that neither the
// datapath object (spec) nor the socket-LB object declares: maps an older build
// pinned and this one dropped. Nothing else ever removes them, and each holds its
// kernel memory until the node reboots. Programs of the older build still
// attached keep their reference until they are replaced. Directories (links/,
// the lab's per-node dirs) are left alone.
func removeDroppedPins(spec *ebpf.CollectionSpec, pinDir string) error {
	sock, err := loadSock()
	if err != nil {
		return fmt.Errorf("load socket-LB spec: %w", err)
	}
	entries, err := os.ReadDir(pinDir)
	if err != nil {
		return fmt.Errorf("list pin dir %s: %w", pinDir, err)
	}
	for _, e := range entries {
		name := e.Name()
		_, ours := spec.Maps[name]
		_, sockOurs := sock.Maps[name]
		if e.IsDir() || ours || sockOurs || !strings.HasPrefix(name, "myelin_") {
			continue
		}
		path := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			continue // not a map: not ours to remove
		}
		err = m.Unpin()
		m.Close()
		if err != nil {
			return fmt.Errorf("unpin map %s that this build no longer uses: %w", path, err)
		}
	}
	return nil
}

// findIncompatiblePins finds every pinned map that no longer matches its spec
// (size or layout changed by an upgrade or a config change), to be created
// afresh and pinned in its place. created names the pinned maps the load will
// create: those not pinned yet and those to replace; replaced says which are to
// be replaced, why, and whether their entries can be carried. Nothing is
// unpinned here.
func findIncompatiblePins(spec *ebpf.CollectionSpec, pinDir string) (created []string, replaced []MapReplacement, err error) {
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		path := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			created = append(created, name)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		r, err := checkPinned(ms, m, name)
		m.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("replace pinned map %s: %w", path, err)
		}
		if r.Reason != "" {
			created = append(created, name)
			replaced = append(replaced, r)
		}
	}
	return created, replaced, nil
}

// checkPinned says what differs between the pinned m and ms (an empty Reason: m
// is reused) and whether m's entries can be carried into the replacement: those
// of a hash, LRU hash, LPM trie or array, as they are when their layout is
// unchanged (what differs is its size or flags, or hash against LRU hash), else
// converted by field name (carryPlan). Per-CPU counters, ring buffers and maps of
// maps are not carried. It fails for
// an endpoints map that holds more endpoints than its replacement would: they
// would be lost for good.
func checkPinned(ms *ebpf.MapSpec, m *ebpf.Map, name string) (MapReplacement, error) {
	incompatible := ms.Compatible(m)
	if incompatible == nil {
		return MapReplacement{}, nil
	}
	r := MapReplacement{Name: name, Reason: strings.TrimSuffix(incompatible.Error(), ": "+ebpf.ErrMapIncompatible.Error())}
	if name == "myelin_policy_ct" { // a connection's slot follows from the table's size and seed
		r.carry, r.conv, r.ConvertErr = policyCTCarryPlan(ms, m)
		return r, nil
	}
	r.carry, r.conv, r.ConvertErr = carryPlan(ms, m)
	if name != "myelin_endpoints" || !r.carry {
		return r, nil
	}
	key, value := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	n, it := 0, m.Iterate()
	for it.Next(key, value) {
		n++
	}
	if err := it.Err(); err != nil {
		return r, fmt.Errorf("read entries: %w", err)
	}
	if n > int(ms.MaxEntries) {
		return r, fmt.Errorf("it holds %d endpoints, more than the %d of the new size (%s): size it for at least %d, or remove pods first",
			n, ms.MaxEntries, r.Reason, n)
	}
	return r, nil
}

// carryPlan says whether m's entries can be carried into a map of ms, and how: as
// they are when their layout is the same by BTF, converted by field name when only
// the values' changed (pinconvert.go; conv), not at all when the BTF shows a change
// that can't be converted (why). Without BTF to compare, same key and value sizes
// carry as they are (TestPinnedMapLayouts keeps such layouts' meaning). why also
// names a changed map type.
func carryPlan(ms *ebpf.MapSpec, m *ebpf.Map) (carry bool, conv *layoutConv, why string) {
	if !carriable(ms.Type, m.Type()) {
		if ms.Type != m.Type() {
			return false, nil, fmt.Sprintf("its type changed (%s to %s)", m.Type(), ms.Type)
		}
		return false, nil, "" // counters, rings, maps of maps: the programs refill them
	}
	sameSizes := m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize
	key, value, err := pinnedTypes(m)
	if err != nil || ms.Key == nil || ms.Value == nil {
		if sameSizes { // no BTF to compare: same sizes, same meaning (TestPinnedMapLayouts)
			return true, nil, ""
		}
		if err == nil {
			err = errors.New("the new object has no BTF for its key and value")
		}
		return false, nil, err.Error()
	}
	conv, identity, err := planLayout(key, value, ms)
	switch {
	case err != nil:
		return false, nil, err.Error()
	case identity && sameSizes:
		return true, nil, ""
	}
	return true, conv, ""
}

// carriable says whether entries of a map of type from can be written, as they
// are, into one of type to.
func carriable(to, from ebpf.MapType) bool {
	hash := func(t ebpf.MapType) bool { return t == ebpf.Hash || t == ebpf.LRUHash }
	switch {
	case hash(to) && hash(from):
		return true
	case to == from && (to == ebpf.LPMTrie || to == ebpf.Array):
		return true
	}
	return false
}

// loadConcurrently is ebpf.NewCollectionWithOptions with the programs verified
// in parallel. cilium/ebpf loads a collection's programs one after another,
// and the verifier is most of an agent's start: myelin_from_pod alone takes
// ~120 ms of the ~250 ms the six programs take in sequence. The maps (and the
// variables backed by them) are created first; each program is then loaded
// on its own with those maps as replacements, so all share them.
func loadConcurrently(spec *ebpf.CollectionSpec, opts ebpf.CollectionOptions) (*ebpf.Collection, error) {
	mapsOnly := spec.Copy()
	mapsOnly.Programs = nil
	coll, err := ebpf.NewCollectionWithOptions(mapsOnly, opts)
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(spec.Programs))
	progs := make([]*ebpf.Program, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			one := spec.Copy()
			one.Programs = map[string]*ebpf.ProgramSpec{name: one.Programs[name]}
			c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: opts.Programs, MapReplacements: coll.Maps})
			if err != nil {
				errs[i] = fmt.Errorf("program %s: %w", name, err)
				return
			}
			progs[i] = c.DetachProgram(name)
			c.Close() // its clones of the shared maps
		})
	}
	wg.Wait()
	coll.Programs = make(map[string]*ebpf.Program, len(names))
	for i, name := range names {
		if progs[i] != nil {
			coll.Programs[name] = progs[i]
		}
	}
	if err := errors.Join(errs...); err != nil {
		coll.Close()
		return nil, err
	}
	return coll, nil
}

// MapReplacement is a pinned map Load replaced because it no longer matched this
// build or configuration. When its entries kept their layout they were copied
// into the new map (Carried; Lost did not fit its new size); otherwise, and for
// counters and event rings, the new map starts empty.
type MapReplacement struct {
	Name   string // the map, e.g. myelin_policy_ct
	Reason string // what differs, e.g. "MaxEntries: 2048 changed to 4096"
	// Carried and Lost count the entries copied into the new map and those
	// that did not fit it; both 0 when nothing was carried.
	Carried, Lost int
	// CarryErr, when set, stopped the copy early (the pinned map changed too
	// fast to walk): what was copied before stays.
	CarryErr string
	// ConvertErr says why entries whose layout changed could not be converted
	// into the new one (pinconvert.go): the map starts empty.
	ConvertErr string
	carry      bool        // copy the entries
	conv       *layoutConv // converting them into the new layout; nil: as they are
}

// Carrying says whether the entries were copied into the new map.
func (r MapReplacement) Carrying() bool { return r.carry }

// Converted says whether the entries were rewritten into a changed layout.
func (r MapReplacement) Converted() bool { return r.conv != nil }
