package policy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A fresh allocator next to pinned maps numbers above what they hold; one read from
// its file keeps its own numbers, and Above never lowers what comes next.
func TestIdentitiesAbove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids.json")
	s, err := LoadIdentities(path)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Fresh() || s.Next() != firstIdentity {
		t.Fatalf("no file: fresh %v, next %d; want fresh, %d", s.Fresh(), s.Next(), firstIdentity)
	}
	s.Above(310)
	if got := s.get("a"); got != 311 {
		t.Errorf("after Above(310) the next key got %d, want 311", got)
	}
	s.Above(100)
	if got := s.get("b"); got != 312 {
		t.Errorf("Above(100) lowered the numbers: the next key got %d, want 312", got)
	}
	if err := s.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadIdentities(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Fresh() || loaded.Next() != 313 || loaded.get("a") != 311 {
		t.Errorf("loaded: fresh %v, next %d, a %d; want not fresh, 313, 311", loaded.Fresh(), loaded.Next(), loaded.get("a"))
	}
}

// At the top of uint32 the counter wraps to firstIdentity, never giving 0 (any peer)
// or another reserved number, and passes over numbers keys still hold (a long-lived
// key's from before the wrap); a released number comes back only once the counter
// has come round to it. Saved and loaded, the wrapped counter stays where it was.
func TestIdentitiesWrap(t *testing.T) {
	s := NewIdentities()
	if got := s.get("old"); got != firstIdentity {
		t.Fatalf("first key got %d, want %d", got, firstIdentity)
	}
	s.get("gone") // 257
	s.release(map[string]bool{"old": true})
	if got := s.get("soon"); got != firstIdentity+2 {
		t.Fatalf("a key right after gone's release got %d, want %d (not gone's 257 again)", got, firstIdentity+2)
	}
	s.Above(^uint32(0) - 2)
	var got []uint32
	for _, k := range []string{"a", "b", "c", "d"} {
		got = append(got, s.get(k))
	}
	want := []uint32{^uint32(0) - 1, ^uint32(0), firstIdentity + 1, firstIdentity + 3}
	if !slices.Equal(got, want) {
		t.Errorf("keys across the wrap got %v, want %v (256 old's and 258 soon's are held; 257 free again)", got, want)
	}
	path := filepath.Join(t.TempDir(), "ids.json")
	if err := s.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadIdentities(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Next() != firstIdentity+4 {
		t.Errorf("loaded after the wrap: next %d, want %d (not after the highest number held)", loaded.Next(), firstIdentity+4)
	}
	if id := loaded.get("e"); id != firstIdentity+4 {
		t.Errorf("loaded: the next key got %d, want %d", id, firstIdentity+4)
	}
}

// A fresh allocator next to pinned maps of a wrapped counter (numbers near the top and
// low ones) gives none of theirs; a file of an older agent whose counter overflowed
// into the reserved numbers has those keys numbered again.
func TestIdentitiesReserveAndReservedInFile(t *testing.T) {
	s := NewIdentities()
	s.Above(^uint32(0) - 1)
	s.Reserve([]uint32{^uint32(0), firstIdentity, firstIdentity + 1})
	if got := s.get("a"); got != firstIdentity+2 {
		t.Errorf("after a wrap beside pinned 256 and 257 the first key got %d, want %d", got, firstIdentity+2)
	}
	path := filepath.Join(t.TempDir(), "ids.json")
	file := `{"next":5,"ids":{"cidr":2,"zero":0,"low":7,"ok":300}}`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadIdentities(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.get("ok") != 300 || loaded.get(worldKey) != 2 {
		t.Errorf("loaded ok %d world %d, want 300 and 2", loaded.get("ok"), loaded.get(worldKey))
	}
	for _, k := range []string{"zero", "low"} {
		if id := loaded.get(k); id < firstIdentity || id == 300 {
			t.Errorf("key %s held a reserved number in the file; numbered again %d, want >= %d and not ok's", k, id, firstIdentity)
		}
	}
}
