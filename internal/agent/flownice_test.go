package agent

import (
	"io"
	"log/slog"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// onReaderThread runs lockReaderThread on a goroutine of its own, which then waits
// until the test ends; the test's own thread is locked meanwhile, so the reader's
// goroutine can't run on it.
func onReaderThread(t *testing.T) *readerThread {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	type result struct {
		th  *readerThread
		err error
	}
	got, end := make(chan result), make(chan struct{})
	t.Cleanup(func() { close(end) })
	go func() {
		th, err := lockReaderThread()
		got <- result{th, err}
		<-end // the thread exits with this goroutine
	}()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.th.tid == unix.Gettid() {
		t.Fatalf("reader ran on the test's thread %d", r.th.tid)
	}
	return r.th
}

func schedOf(t *testing.T, tid int) *unix.SchedAttr {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestLockReaderThread checks that the reader's thread gets flowReaderNice and
// flowReaderSlice, may go idle exactly when the rules let it leave idle again, and
// the thread that asked for nothing keeps its scheduling.
func TestLockReaderThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := schedOf(t, 0)
	if before.Policy != unix.SCHED_NORMAL {
		t.Fatalf("the test runs with scheduling policy %d; run it with the normal policy", before.Policy)
	}
	th := onReaderThread(t)
	got := schedOf(t, th.tid)
	want := max(int(before.Nice), flowReaderNice)
	if got.Policy != unix.SCHED_NORMAL || int(got.Nice) != want || th.nice != want {
		t.Errorf("reader thread policy %d nice %d (recorded %d), want %d nice %d (the test's is %d)",
			got.Policy, got.Nice, th.nice, unix.SCHED_NORMAL, want, before.Nice)
	}
	if got.Runtime != uint64(flowReaderSlice) {
		t.Errorf("reader thread slice %d ns, want %d (a kernel before 6.12 has no custom slices)", got.Runtime, flowReaderSlice)
	}
	var rlim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NICE, &rlim); err != nil {
		t.Fatal(err)
	}
	if rules := idleExitAllowed(hasSysNice(), rlim.Cur, want); (rules == nil) != (th.idleErr == nil) {
		t.Errorf("reader may go idle: %v; the rules say %v", th.idleErr, rules)
	}
	after := schedOf(t, 0)
	if after.Nice != before.Nice || after.Runtime != before.Runtime || after.Policy != before.Policy {
		t.Errorf("test thread changed from %+v to %+v", before, after)
	}
}

// TestPrivilegedReaderGuard: with CAP_SYS_NICE the reader's thread goes SCHED_IDLE,
// is lifted to its nice value when the ring is half full and goes idle again once
// it is drained, and the guard's status says so.
func TestPrivilegedReaderGuard(t *testing.T) {
	if testing.Short() || !hasSysNice() {
		t.Skip("needs CAP_SYS_NICE to lift a thread out of SCHED_IDLE: run as root (make test does)")
	}
	th := onReaderThread(t)
	if th.idleErr != nil {
		t.Fatalf("with CAP_SYS_NICE the reader may not go idle: %v", th.idleErr)
	}
	used, size := 0, 1<<20
	g := newReaderGuard(th, func() (int, int) { return used, size }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	expect := func(when string, policy uint32) {
		t.Helper()
		a := schedOf(t, th.tid)
		if a.Policy != policy || int(a.Nice) != th.nice || a.Runtime != uint64(flowReaderSlice) {
			t.Errorf("%s: reader thread policy %d nice %d slice %d, want policy %d nice %d slice %d",
				when, a.Policy, a.Nice, a.Runtime, policy, th.nice, flowReaderSlice)
		}
	}
	if !g.goIdle() { // then step from the test, not from start's ticker: no timing
		t.Fatalf("reader did not go idle: %v", th.idleErr)
	}
	expect("started", unix.SCHED_IDLE)
	used = size / 2
	g.step()
	expect("ring half full", unix.SCHED_NORMAL)
	used = size / 4
	g.step()
	expect("ring a quarter full", unix.SCHED_NORMAL)
	used = 0
	g.step()
	expect("ring drained", unix.SCHED_IDLE)
	if n := g.lifts.Load(); n != 1 {
		t.Errorf("lifted %d times, want 1", n)
	}
	if s, want := g.status(), "reader thread SCHED_IDLE, lifted to nice 10 while the ring is over 1/2 full (1 times; now SCHED_IDLE)"; s != want {
		t.Errorf("status %q, want %q", s, want)
	}
}
