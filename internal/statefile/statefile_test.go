package statefile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWriteReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	for _, content := range []string{`{"a":1}`, `{"b":2}`} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("after Write(%s): %q %v", content, b, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v %v, want 0600", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d files next to %s, want it alone (no temporary file left)", len(entries), path)
	}
}

// A write that fails leaves what is at path as it was and no temporary file.
func TestWriteFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	// The rename can't replace it: a directory that is not empty is there.
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(path, "x")); err != nil {
		t.Errorf("after the failed write: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after the failed write %s holds %d entries, want state.json alone", dir, len(entries))
	}
}

// Writers of one file at once each put a whole file of their own in place: the file
// ends up one writer's whole content, and none fails or leaves a temporary file.
func TestWriteConcurrentWritersOfOneFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	contents := map[string]bool{}
	var writers []string
	for i := range 4 {
		c := strings.Repeat(string(rune('a'+i)), 64<<10)
		contents[c] = true
		writers = append(writers, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for _, c := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := Write(path, []byte(c), 0o600); err != nil {
					errs <- err
					return
				}
				if b, err := os.ReadFile(path); err != nil || !contents[string(b)] {
					errs <- fmt.Errorf("%s holds %d bytes starting %.8q, no writer's whole content (%v)", path, len(b), b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%s holds %d entries after the writes, want state.json alone", dir, len(entries))
	}
}

// OutDir makes a missing directory and refuses one others may write in.
func TestOutDir(t *testing.T) {
	base := t.TempDir()
	mine := filepath.Join(base, "a", "results")
	if err := OutDir(mine); err != nil {
		t.Fatalf("a new directory: %v", err)
	}
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := OutDir(shared); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a world-writable directory: %v, want a refusal", err)
	}
}

// A symlink planted at the file is replaced, and one where Write put its temporary
// file before it named them at random is left alone; neither is written through:
// root's write must not land where it points.
func TestWriteDoesNotFollowSymlinks(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	for _, planted := range []string{"state.json.tmp", "state.json"} {
		target := filepath.Join(elsewhere, planted+".target")
		if err := os.WriteFile(target, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "state.json")
		if err := os.Symlink(target, filepath.Join(dir, planted)); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, []byte(`{"a":1}`), 0o600); err != nil {
			t.Fatalf("Write with a symlink at %s: %v", planted, err)
		}
		if b, err := os.ReadFile(target); err != nil || string(b) != "precious" {
			t.Errorf("with a symlink at %s, its target now holds %q (%v); want it untouched", planted, b, err)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("with a symlink at %s: %s is %v (%v), want a regular file of mode 0600", planted, path, fi.Mode(), err)
		}
		os.Remove(path)
	}
}

// PrivateDir makes a 0700 directory and refuses a symlink or one others could write.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "made", "here")
	if err := PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("made %s with mode %v (%v), want 0700", dir, fi.Mode().Perm(), err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("PrivateDir of a symlink: %v, want it refused", err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(open); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("PrivateDir of a 0777 directory: %v, want it refused", err)
	}
}

// A state directory's parent through which someone else could have root write
// elsewhere is refused, naming the parent: a symlink (nothing is made where it
// points) and a directory writable by others without the sticky bit. A sticky one writable by all (/tmp) and the caller's own are fine.
func TestPrivateDirParent(t *testing.T) {
	base := t.TempDir()
	elsewhere := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(link, "cni-deleted")); err == nil || !strings.Contains(err.Error(), link+" is a symlink") {
		t.Errorf("PrivateDir under a symlinked parent: %v, want it refused naming %s", err, link)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("PrivateDir made %d entries where the parent symlink points", len(entries))
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(open, "cni-deleted")); err == nil || !strings.Contains(err.Error(), open+" is writable by others") {
		t.Errorf("PrivateDir under a 0777 parent: %v, want it refused naming %s", err, open)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(open, "cni-deleted")); err != nil {
		t.Errorf("PrivateDir under a sticky 1777 parent: %v", err)
	}
}

// The directories above a state directory's parent are held to what its parent is:
// one writable by others without the sticky bit is refused, naming it, also when the
// path reaches it through a symlink; with the sticky bit, and the entry below it the
// caller's, it is fine.
func TestPrivateDirAncestors(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.MkdirAll(filepath.Join(open, "safe"), 0o755); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(open, "safe", "state", "cni-deleted")
	if err := PrivateDir(deep); err == nil || !strings.Contains(err.Error(), open+" above it is writable by others") {
		t.Errorf("PrivateDir two levels under a 0777 directory: %v, want it refused naming %s", err, open)
	}
	if _, err := os.Stat(filepath.Join(open, "safe", "state")); !os.IsNotExist(err) {
		t.Errorf("PrivateDir made directories under the 0777 %s before refusing it (stat: %v)", open, err)
	}
	// Through a link in a safe directory: checked where it leads.
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(open, "safe"), link); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(link, "state", "cni-deleted")); err == nil || !strings.Contains(err.Error(), open+" above it") {
		t.Errorf("PrivateDir through a symlink into the 0777 %s: %v, want it refused naming it", open, err)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(deep); err != nil {
		t.Errorf("PrivateDir under a sticky 1777 directory, the entry in it the caller's: %v", err)
	}
}

// As root: a directory above a state directory's parent that belongs to another user
// (but root) is refused, and so is another user's entry (a symlink) in a sticky
// world-writable one.
func TestPrivilegedPrivateDirAncestorsOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown takes root")
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.MkdirAll(filepath.Join(theirs, "mine"), 0o755); err != nil || os.Chown(theirs, 65534, 65534) != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(theirs, "mine", "state", "cni-deleted")); err == nil || !strings.Contains(err.Error(), theirs+" above it belongs to uid 65534") {
		t.Errorf("PrivateDir two levels under a directory of uid 65534: %v, want it refused naming it", err)
	}
	tmp := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil || os.Chmod(tmp, 0o777|os.ModeSticky) != nil {
		t.Fatal(err)
	}
	// A symlink another user planted there, to a directory of root's: it is theirs to
	// point elsewhere.
	planted := filepath.Join(tmp, "planted")
	if err := os.Symlink(t.TempDir(), planted); err != nil || os.Lchown(planted, 65534, 65534) != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(planted, "state", "cni-deleted")); err == nil || !strings.Contains(err.Error(), planted+" in the sticky") {
		t.Errorf("PrivateDir through uid 65534's symlink in a sticky 1777 directory: %v, want it refused naming it", err)
	}
}

// As root: a state directory's parent of another user (but root) is refused.
func TestPrivilegedPrivateDirParentOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown takes root")
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil || os.Chown(theirs, 65534, 65534) != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(filepath.Join(theirs, "cni-deleted")); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("PrivateDir under a parent of uid 65534: %v, want it refused", err)
	}
}

// RemoveTemporary removes what interrupted Writes left, of this version and of older
// ones, and nothing else.
func TestRemoveTemporary(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".tmp-0123456789abcdef", "a.json.tmp", "a.json", "b.json.corrupt"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveTemporary(dir); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "a.json b.json.corrupt" {
		t.Errorf("after RemoveTemporary %s holds %v, want a.json and b.json.corrupt", dir, left)
	}
	if err := RemoveTemporary(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("RemoveTemporary of a missing directory: %v", err)
	}
}

// RemoveTemporaryOlder leaves a temporary file a Write may still be using (recent)
// and removes one older than the age.
func TestRemoveTemporaryOlder(t *testing.T) {
	dir := t.TempDir()
	old, fresh := filepath.Join(dir, ".tmp-00000000000000aa"), filepath.Join(dir, ".tmp-00000000000000bb")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTemporaryOlder(dir, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the hour-old %s is still there (%v)", old, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh %s, which a Write may be using, was removed: %v", fresh, err)
	}
}

// RemoveOwnTemporaryOlder, for a directory other tools write in too, removes only
// Write's own old temporary files: not another tool's *.tmp or .tmp-something, not
// a fresh one of its own.
func TestRemoveOwnTemporaryOlder(t *testing.T) {
	dir := t.TempDir()
	names := []string{".tmp-00000000000000aa", ".tmp-00000000000000bb", "10-other.conflist.tmp",
		".tmp-other", ".tmp-00000000000000AA", ".tmp-00000000000000aa0", "10-myelin.conflist"}
	long := time.Now().Add(-time.Hour)
	for i, name := range names {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if i != 1 { // .tmp-…bb stays fresh
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := RemoveOwnTemporaryOlder(dir, time.Minute); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := ".tmp-00000000000000AA .tmp-00000000000000aa0 .tmp-00000000000000bb .tmp-other 10-myelin.conflist 10-other.conflist.tmp"
	if strings.Join(left, " ") != want {
		t.Errorf("after RemoveOwnTemporaryOlder %s holds %v, want %s", dir, left, want)
	}
}
