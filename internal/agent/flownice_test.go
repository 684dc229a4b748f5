package agent

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLowerFlowReaderPriority checks that the reader's thread gets flowReaderNice and
// flowReaderSlice, and the thread that asked for nothing keeps its scheduling.
func TestLowerFlowReaderPriority(t *testing.T) {
	runtime.LockOSThread() // the reader's goroutine can't run on this thread then
	defer runtime.UnlockOSThread()
	before, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if before.Policy != unix.SCHED_NORMAL {
		t.Fatalf("the test runs with scheduling policy %d; run it with the normal policy", before.Policy)
	}
	type result struct {
		tid  int
		attr *unix.SchedAttr
		err  error
	}
	done := make(chan result)
	go func() {
		if err := lowerFlowReaderPriority(); err != nil {
			done <- result{err: err}
			return
		}
		a, err := unix.SchedGetAttr(0, 0)
		done <- result{tid: unix.Gettid(), attr: a, err: err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := max(before.Nice, flowReaderNice); r.attr.Nice != want {
		t.Errorf("reader thread nice %d, want %d (the test's is %d)", r.attr.Nice, want, before.Nice)
	}
	if r.attr.Runtime != uint64(flowReaderSlice) {
		t.Errorf("reader thread slice %d ns, want %d (a kernel before 6.12 has no custom slices)", r.attr.Runtime, flowReaderSlice)
	}
	if r.tid == unix.Gettid() {
		t.Errorf("reader ran on the test's thread %d", r.tid)
	}
	after, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Nice != before.Nice || after.Runtime != before.Runtime {
		t.Errorf("test thread changed from nice %d slice %d to nice %d slice %d", before.Nice, before.Runtime, after.Nice, after.Runtime)
	}
}
