package agent

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
