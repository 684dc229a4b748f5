package datapath

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// endpointEntry is one carried-over row of the endpoints map.
type endpointEntry struct {
	key   [4]byte
	value myelinEndpointInfo
}

// loadPinned loads spec into objs, reusing the maps pinned in pinDir. It
// returns the names of the pinned maps it created (none was pinned, or the
// pinned one no longer matched).
func loadPinned(spec *ebpf.CollectionSpec, pinDir string, objs *myelinObjects) ([]string, error) {
	carried, created, err := replaceIncompatiblePins(spec, pinDir)
	if err != nil {
		return nil, err
	}
	coll, err := loadConcurrently(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinDir}})
	if err != nil {
		return nil, fmt.Errorf("load datapath objects: %w", err)
	}
	err = coll.Assign(objs)
	coll.Close() // what objs did not take
	if err != nil {
		return nil, fmt.Errorf("assign datapath objects: %w", err)
	}
	for _, e := range carried {
		if err := objs.MyelinEndpoints.Update(e.key, e.value, ebpf.UpdateAny); err != nil {
			objs.Close()
			return nil, fmt.Errorf("carry endpoint %v into resized endpoints map: %w", e.key, err)
		}
	}
	return created, nil
}

// replaceIncompatiblePins unpins every pinned map that no longer matches
// its spec (size or layout changed by an upgrade or a config change), so
// the load creates it afresh. The endpoints map's entries are returned to be
// written into its replacement when the key and value layout is unchanged;
// counters and queued events are not carried. created names the pinned maps
// the load will create: those not pinned yet and those unpinned here.
func replaceIncompatiblePins(spec *ebpf.CollectionSpec, pinDir string) (carried []endpointEntry, created []string, err error) {
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
		entries, replaced, err := replaceIfIncompatible(ms, m, name)
		m.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("replace pinned map %s: %w", path, err)
		}
		if replaced {
			created = append(created, name)
		}
		carried = append(carried, entries...)
	}
	return carried, created, nil
}

// replaceIfIncompatible unpins m if it does not match ms (replaced), returning
// the entries to carry over.
func replaceIfIncompatible(ms *ebpf.MapSpec, m *ebpf.Map, name string) (entries []endpointEntry, replaced bool, err error) {
	if ms.Compatible(m) == nil {
		return nil, false, nil
	}
	if name == "myelin_endpoints" && m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize {
		var e endpointEntry
		it := m.Iterate()
		for it.Next(&e.key, &e.value) {
			entries = append(entries, e)
		}
		if err := it.Err(); err != nil {
			return nil, false, fmt.Errorf("read entries: %w", err)
		}
	}
	if err := m.Unpin(); err != nil {
		return nil, false, err
	}
	return entries, true, nil
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
