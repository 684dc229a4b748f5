package labplan

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckDir refuses directories whose removal (lab down) would take other programs'
// files, and makes the others absolute and clean.
func TestCheckDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const home = "/home/alice"
	for _, c := range []struct {
		dir, want string
		shared    bool // want ErrSharedDir; else, with want "", another error
	}{
		{DefaultDir, DefaultDir, false},
		{"/run/myelin-lab/", DefaultDir, false},
		{"/run//myelin-lab/./", DefaultDir, false},
		{"/tmp/mylab", "/tmp/mylab", false},
		{"/home/alice/lab", "/home/alice/lab", false},
		{"lab", filepath.Join(wd, "lab"), false},
		{"", "", false},
		{"  ", "", false},
		{"/", "", true},
		{"//", "", true},
		{"/tmp", "", true},
		{"/tmp/", "", true},
		{"/tmp/x/..", "", true},
		{"/var", "", true},
		{"/run", "", true},
		{"/root", "", true},
		{"/home", "", true},
		{"/var/lib", "", true},
		{"/var/tmp/", "", true},
		{home, "", true},
		{home + "/", "", true},
	} {
		got, err := CheckDir(c.dir, home)
		switch {
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("CheckDir(%q) = %q, %v; want %q", c.dir, got, err, c.want)
		case c.want == "" && err == nil:
			t.Errorf("CheckDir(%q) = %q; want it refused", c.dir, got)
		case c.want == "" && errors.Is(err, ErrSharedDir) != c.shared:
			t.Errorf("CheckDir(%q): %v; want ErrSharedDir %v", c.dir, err, c.shared)
		case err != nil && !strings.Contains(err.Error(), "e.g. /"):
			t.Errorf("CheckDir(%q): %v; want it to say which directory to use", c.dir, err)
		}
	}
	// A directory above the home directory holds it.
	if _, err := CheckDir("/srv/users", "/srv/users/alice"); !errors.Is(err, ErrSharedDir) {
		t.Errorf("CheckDir above the home directory: %v; want ErrSharedDir", err)
	}
}
