package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/testenv"
)

// privilegedPinDir mounts a private bpffs for the test and returns a pin dir on it.
func privilegedPinDir(t *testing.T) string {
	t.Helper()
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root to mount bpffs and load BPF: run as root (make test does)")
	}
	mnt := t.TempDir()
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs on %s: %v", mnt, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return filepath.Join(mnt, "node")
}

// gcRoundsOK says whether a GC round has run without an error: its first collector
// (nat-gc) and its last (policy-ct-gc) both reported success.
func gcRoundsOK(l *loops) bool {
	ok := map[string]bool{}
	for _, s := range l.snapshot() {
		ok[s.Name] = s.LastError == "" // listed: it ran
	}
	return ok["nat-gc"] && ok["policy-ct-gc"]
}

// With no apiserver and no Load, the GC loop adopts the maps a previous agent pinned
// and collects through them; it waits (collects nothing, reports nothing) on a node
// with no pins, and switches to the datapath it is handed.
func TestPrivilegedCollectorRunsBeforeLoad(t *testing.T) {
	dir := privilegedPinDir(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// A first start: no pins, nothing collected until Load hands its datapath over.
	l := newLoops()
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{pinDir: dir, interval: 20 * time.Millisecond, log: log, loops: l,
		loaded: make(chan *datapath.Datapath, 1), done: make(chan struct{})}
	go c.run(ctx)
	time.Sleep(100 * time.Millisecond)
	if gcRoundsOK(l) {
		t.Error("GC reported a run with no pinned maps and no datapath")
	}
	dp, err := datapath.Load(datapath.Config{PinDir: dir, HostRouting: datapath.HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	c.use(dp)
	testenv.WaitFor(t, "GC through the loaded datapath", func() bool { return gcRoundsOK(l) })
	cancel()
	c.wait()
	dp.Close() // the agent exits; the pins stay

	// A Load hands over a round at once, not a tick later: budgets the adopted
	// rounds could not apply are applied then.
	l1 := newLoops()
	ctx1, cancel1 := context.WithCancel(context.Background())
	c1 := &collector{pinDir: dir, interval: time.Hour, log: log, loops: l1,
		loaded: make(chan *datapath.Datapath, 1), done: make(chan struct{})}
	go c1.run(ctx1)
	dp1, err := datapath.Load(datapath.Config{PinDir: dir, HostRouting: datapath.HostRoutingBPF})
	if err != nil {
		t.Fatal(err)
	}
	c1.use(dp1)
	testenv.WaitFor(t, "a GC round as the datapath is handed over", func() bool { return gcRoundsOK(l1) })
	cancel1()
	c1.wait()
	dp1.Close()

	// The next agent, apiserver unreachable: GC runs on the adopted pins.
	l2 := newLoops()
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2 := &collector{pinDir: dir, interval: 20 * time.Millisecond, log: log, loops: l2,
		loaded: make(chan *datapath.Datapath, 1), done: make(chan struct{})}
	go c2.run(ctx2)
	testenv.WaitFor(t, "GC on the adopted pins", func() bool { return gcRoundsOK(l2) })
	cancel2()
	c2.wait()
}
