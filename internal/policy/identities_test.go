package policy

import (
	"path/filepath"
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
