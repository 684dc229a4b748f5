// Package testenv decides what a test does when the machine lacks something it needs
// (root, a tool, a kernel feature): on a developer's machine it skips with the reason;
// in CI (CI=true) it fails, because there `make test` must have installed or found
// everything itself and a skip would count a test that never ran as passed.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/myelin-net/myelin/internal/helmtool"
)

// InCI reports whether the tests run in CI (the environment variable CI is "true").
func InCI() bool { return os.Getenv("CI") == "true" }

// Skipf skips the test with the reason, or fails it with the same reason in CI.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true, so this is a failure, not a skip: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips the test in -short mode (an explicit choice, also in CI) and
// otherwise needs root: what says what the test does with it.
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("test needing root skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		Skipf(t, "needs root to %s: run as root (make test does)", what)
	}
}

// RequireTools needs every named program on PATH (make setup installs them).
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			Skipf(t, "needs %s (make setup installs it): %v", tool, err)
		}
	}
}

// LabLockFile serialises the test packages that bring up a lab: `go test ./...` runs
// packages in parallel, and a machine holds one lab at a time.
const LabLockFile = "/run/myelin-test-lab.lock"

// LockLab waits until no other test package holds the lab, and holds it until the
// test (and its cleanups, which take the lab down) ends.
func LockLab(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(LabLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("open the lab lock %s: %v", LabLockFile, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", LabLockFile, err)
	}
	t.Cleanup(func() { f.Close() }) // registered first, so it runs after lab down
}

// Helm returns the pinned helm (make setup builds it into the tool cache), or skips
// the test without it (fails in CI).
func Helm(t testing.TB) string {
	t.Helper()
	bin := helmtool.Bin()
	if bin == "" {
		Skipf(t, "needs helm %s (make setup builds it into %s)", helmtool.Version, helmtool.BinDir())
	}
	return bin
}

// ServeUnixHTTP serves handler on a unix socket in a temporary directory until the
// test ends and returns the socket's path: a stand-in for the agent's API socket.
func ServeUnixHTTP(t testing.TB, handler http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// WaitFor polls cond until it holds, failing t after a minute: a bound for a hang,
// far beyond anything the tests wait for on a loaded machine under -race.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	const limit = time.Minute
	for end := time.Now().Add(limit); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// InNetns runs fn on a locked OS thread inside a new network namespace named
// prefix plus a random suffix, deleted afterwards. The thread is never handed
// back to the Go scheduler: its goroutine exits still locked, so the runtime
// discards the thread instead of reusing it in the wrong namespace. fn must
// report failures with t.Error (not t.Fatal: it runs off the test goroutine).
// For tests only: product code enters namespaces through internal/netns.
func InNetns(t testing.TB, prefix string, fn func(nsName string)) {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := prefix + hex.EncodeToString(suffix)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		ns, err := netns.NewNamed(name) // also moves this thread into it
		if err != nil {
			t.Errorf("create netns %s: %v", name, err)
			return
		}
		defer func() {
			ns.Close()
			if err := netns.DeleteNamed(name); err != nil {
				t.Errorf("delete netns %s: %v", name, err)
			}
		}()
		fn(name)
	}()
	<-done
}
