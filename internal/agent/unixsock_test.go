package agent

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// With umask 0 in a 0755 directory (as /run/myelin), the agent's socket is 0600 in a
// 0700 directory before it is renamed into place, so no other user can connect to it
// at any moment; in place it is 0600, replaces a stale file, is the listener's
// address, leaves no directory behind, and is removed when the listener closes.
func TestUnixSocketNeverReachableByOthers(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")

	l, hidden, err := listenHidden(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(hidden)); err != nil || fi.Mode().Perm() != 0o700 || filepath.Dir(filepath.Dir(hidden)) != dir {
		t.Errorf("the socket before its rename is in %s: %v, %v; want a 0700 directory in %s", filepath.Dir(hidden), fi.Mode(), err, dir)
	}
	if fi, err := os.Stat(hidden); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket before its rename: %v, %v; want a 0600 socket", fi.Mode(), err)
	}
	l.Close()
	os.Remove(hidden)
	os.Remove(filepath.Dir(hidden))

	if err := os.WriteFile(sock, nil, 0o644); err != nil { // a stale file
		t.Fatal(err)
	}
	pl, err := listenUnixPrivate(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket in place: %v, %v; want a 0600 socket", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the socket alone", dir, len(entries))
	}
	if got := pl.Addr().String(); got != sock {
		t.Errorf("listener address %s, want %s", got, sock)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("connect to %s: %v", sock, err)
	}
	c.Close()
	pl.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
}

// A private socket directory a crash left (".<digits>", older than a minute) is
// removed when the agent listens again; a fresh one (another listen under way),
// one holding more than the socket, and other dot directories stay.
func TestListenRemovesStaleHiddenDirs(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * staleHiddenAge)
	mk := func(name string, files ...string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(p, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	stale, empty, fresh, busy, other := mk(".1234", "s"), mk(".5678"), mk(".4321", "s"), mk(".8765", "s", "x"), mk(".cache", "s")
	for _, p := range []string{stale, empty, busy, other} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	l, err := listenUnixPrivate(filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for p, want := range map[string]bool{stale: false, empty: false, fresh: true, busy: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s after listening: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}
