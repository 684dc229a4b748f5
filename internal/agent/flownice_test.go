package agent

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLowerFlowReaderPriority checks that the reader's thread gets flowReaderNice and
// the thread that asked for nothing keeps its priority.
func TestLowerFlowReaderPriority(t *testing.T) {
	runtime.LockOSThread() // the reader's goroutine can't run on this thread then
	defer runtime.UnlockOSThread()
	before, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		tid, prio int
		err       error
	}
	done := make(chan result)
	go func() {
		if err := lowerFlowReaderPriority(); err != nil {
			done <- result{err: err}
			return
		}
		tid := unix.Gettid()
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid) // the kernel's 20 - nice
		done <- result{tid: tid, prio: prio, err: err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := max(flowReaderNice, 20-before)
	if got := 20 - r.prio; got != want {
		t.Errorf("reader thread nice %d, want %d (the test's was %d)", got, want, 20-before)
	}
	if r.tid == unix.Gettid() {
		t.Errorf("reader ran on the test's thread %d", r.tid)
	}
	after, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("test thread priority changed from %d to %d", before, after)
	}
}
