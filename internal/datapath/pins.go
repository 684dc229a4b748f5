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

// endpointEntry is one carried-over row of the endpoints map.
type endpointEntry struct {
	key   [4]byte
	value myelinEndpointInfo
}

// loadPinned loads spec into objs, reusing the maps pinned in pinDir. It
// returns the names of the pinned maps it created (none was pinned, or the
// pinned one no longer matched) and the pinned maps it replaced. A pin is
// replaced only once the whole load has succeeded: a failed Load leaves every
// pin as it was, still serving the programs attached.
func loadPinned(spec *ebpf.CollectionSpec, pinDir string, objs *myelinObjects) ([]string, []MapReplacement, error) {
	carried, created, replaced, err := findIncompatiblePins(spec, pinDir)
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
	if m := coll.Maps["myelin_endpoints"]; m != nil {
		for _, e := range carried {
			if err := m.Update(e.key, e.value, ebpf.UpdateAny); err != nil {
				return nil, nil, fmt.Errorf("carry endpoint %v into resized endpoints map: %w", e.key, err)
			}
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
// afresh and pinned in its place. The endpoints map's entries are returned to be
// written into its replacement when the key and value layout is unchanged;
// counters and queued events are not carried. created names the pinned maps
// the load will create: those not pinned yet and those to replace; replaced
// says which are to be replaced and why. Nothing is unpinned here.
func findIncompatiblePins(spec *ebpf.CollectionSpec, pinDir string) (carried []endpointEntry, created []string, replaced []MapReplacement, err error) {
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
			return nil, nil, nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		entries, reason, err := checkPinned(ms, m, name)
		m.Close()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("replace pinned map %s: %w", path, err)
		}
		if reason != "" {
			created = append(created, name)
			replaced = append(replaced, MapReplacement{Name: name, Reason: reason})
		}
		carried = append(carried, entries...)
	}
	return carried, created, replaced, nil
}

// checkPinned returns what differs between the pinned m and ms (empty: m is
// reused) and the entries to carry over. It fails for an endpoints map that holds
// more endpoints than its replacement would: they would be lost for good.
func checkPinned(ms *ebpf.MapSpec, m *ebpf.Map, name string) (entries []endpointEntry, reason string, err error) {
	incompatible := ms.Compatible(m)
	if incompatible == nil {
		return nil, "", nil
	}
	reason = strings.TrimSuffix(incompatible.Error(), ": "+ebpf.ErrMapIncompatible.Error())
	if name == "myelin_endpoints" && m.KeySize() == ms.KeySize && m.ValueSize() == ms.ValueSize {
		var e endpointEntry
		it := m.Iterate()
		for it.Next(&e.key, &e.value) {
			entries = append(entries, e)
		}
		if err := it.Err(); err != nil {
			return nil, "", fmt.Errorf("read entries: %w", err)
		}
		if len(entries) > int(ms.MaxEntries) {
			return nil, "", fmt.Errorf("it holds %d endpoints, more than the %d of the new size (%s): size it for at least %d, or remove pods first",
				len(entries), ms.MaxEntries, reason, len(entries))
		}
	}
	return entries, reason, nil
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
// build or configuration; its entries were dropped (the endpoints map's carried).
type MapReplacement struct {
	Name   string // the map, e.g. myelin_policy_ct
	Reason string // what differs, e.g. "MaxEntries: 2048 changed to 4096"
}
