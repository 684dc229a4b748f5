package logtail

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLines(t *testing.T) {
	in := "first\n\n  second  \nthird\n\n"
	if got, want := Lines(in, 2), []string{"second", "third"}; !slices.Equal(got, want) {
		t.Errorf("Lines(_, 2) = %q, want %q", got, want)
	}
	if got := Lines(in, 10); len(got) != 3 {
		t.Errorf("Lines(_, 10) = %q, want all three non-empty lines", got)
	}
	if got := Last("\n\n"); got != "" {
		t.Errorf("Last of blank lines = %q, want empty", got)
	}
}

func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("a\nb failed \n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := File(p); got != "b failed" {
		t.Errorf("File = %q, want %q", got, "b failed")
	}
	if got := File(filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Errorf("File of a missing file = %q, want empty", got)
	}
}
