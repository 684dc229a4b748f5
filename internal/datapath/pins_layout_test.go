package datapath

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// pinnedLayoutsFile records the key and value layout of every map the objects pin
// by name, as this build declares them.
const pinnedLayoutsFile = "testdata/pinned-layouts.txt"

// TestPinnedMapLayouts guards the one map change Load cannot see: Load compares a
// pinned map with this build's by type, sizes and flags only (pins.go), so a key
// or value struct changed without changing its size would have an upgraded node's
// programs read the old entries as the new layout. When this fails, either rename
// the map (or change its size) so Load replaces it, or, if every byte keeps its
// meaning, accept the change: MYELIN_UPDATE_LAYOUTS=1 go test -run
// TestPinnedMapLayouts ./internal/datapath/. A replaced map's values are converted
// by field name (pinconvert.go): a renamed field starts at zero there, so rename a
// field only when zero is a safe start for it (or its meaning changed too).
func TestPinnedMapLayouts(t *testing.T) {
	got, err := pinnedLayouts()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("MYELIN_UPDATE_LAYOUTS") == "1" {
		if err := os.MkdirAll(filepath.Dir(pinnedLayoutsFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pinnedLayoutsFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(pinnedLayoutsFile)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("layouts of pinned maps changed (%s): a map whose key and value sizes stay the same is reused by Load with the "+
			"old entries, so rename it or change its size; a replaced map's entries are converted by field name (pinconvert.go), "+
			"so a field whose meaning changes needs a new name, and a new field must mean nothing at zero; "+
			"if so, accept with MYELIN_UPDATE_LAYOUTS=1.\n"+
			"got:\n%s\nwant:\n%s", pinnedLayoutsFile, got, want)
	}
}

// pinnedLayouts describes every pinned map of the datapath and socket-LB objects:
// its name, sizes and the Go declaration of its key and value types.
func pinnedLayouts() (string, error) {
	tc, err := loadMyelin()
	if err != nil {
		return "", err
	}
	sock, err := loadSock()
	if err != nil {
		return "", err
	}
	all := map[string]*ebpf.MapSpec{}
	for _, spec := range []*ebpf.CollectionSpec{tc, sock} {
		for name, ms := range spec.Maps {
			if ms.Pinning == ebpf.PinByName {
				all[name] = ms
			}
		}
	}
	var b strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range all {
			if !yield(n) {
				return
			}
		}
	}) {
		ms := all[name]
		fmt.Fprintf(&b, "%s %s key %d value %d\n", name, ms.Type, ms.KeySize, ms.ValueSize)
		for _, part := range []struct {
			what string
			typ  btf.Type
		}{{"key", ms.Key}, {"value", ms.Value}} {
			if part.typ == nil {
				continue
			}
			decl, err := (&btf.GoFormatter{}).TypeDeclaration(part.what, part.typ)
			if err != nil {
				return "", fmt.Errorf("format %s %s: %w", name, part.what, err)
			}
			fmt.Fprintf(&b, "\t%s\n", strings.ReplaceAll(decl, "\n", "\n\t"))
		}
	}
	return b.String(), nil
}
