package agent

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// flowReaderNice and flowReaderSlice are how the thread that reads the datapath's flow
// ring (and converts, stores and counts its records) is scheduled when it is not idle
// (flowsched.go). Flows are telemetry about the pods' traffic: with the pods' processes
// busy on every vCPU (a TCP_CRR client and server on the two vCPUs of a small node), a
// reader at their priority took its time from them (docs/observability.md, "What it
// costs"). At nice 10 it gets about a tenth of a contended vCPU, several times what a
// record stream at the ring's rate needs; past that the ring fills and records are
// counted lost (FLOWS_LOST), never the packets slowed. The short slice (EEVDF, Linux
// 6.12+; older kernels ignore it) lets a waking pod process preempt a reader that is
// draining a batch within 0.1 ms instead of the scheduler's default slice of a few
// milliseconds.
const (
	flowReaderNice  = 10
	flowReaderSlice = 100 * time.Microsecond
)

// capSysNice is CAP_SYS_NICE's bit in the capability sets (linux/capability.h).
const capSysNice = 23

// readerThread is the flow reader's OS thread and what its scheduling may be.
type readerThread struct {
	tid  int
	nice int // at SCHED_OTHER: flowReaderNice, or the agent's own if that is higher
	// idleErr is why the thread may not use SCHED_IDLE; nil if it may.
	idleErr error
}

// lockReaderThread locks the calling goroutine to its OS thread and gives that thread
// its nice value and flowReaderSlice (raising the nice value needs no privilege), then
// decides whether it may go idle: only if it can be lifted out of SCHED_IDLE again
// (idleExitAllowed, then tried on a throwaway thread). sched_setattr with pid 0
// changes the calling thread only. The thread is never handed back to the Go runtime
// (no UnlockOSThread): it exits with the goroutine, so no other goroutine ever runs
// with its scheduling.
func lockReaderThread() (*readerThread, error) {
	runtime.LockOSThread()
	t := &readerThread{tid: unix.Gettid(), nice: flowReaderNice}
	cur, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return t, fmt.Errorf("read flow reader scheduling: %w", err)
	}
	if cur.Policy != unix.SCHED_NORMAL { // batch, idle or real-time: chosen by whoever started the agent
		t.idleErr = fmt.Errorf("the agent runs with scheduling policy %d, kept", cur.Policy)
		return t, nil
	}
	t.nice = max(int(cur.Nice), flowReaderNice)
	if err := t.set(readerNice); err != nil {
		t.idleErr = err
		return t, err
	}
	t.idleErr = checkIdleExit(t.nice)
	return t, nil
}

// set gives the thread class c: SCHED_IDLE, or SCHED_OTHER at the thread's nice value,
// both with flowReaderSlice. Any thread of the agent may call it.
func (t *readerThread) set(c readerClass) error {
	attr := unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: int32(t.nice), Runtime: uint64(flowReaderSlice)}
	if c == readerIdle {
		attr.Policy = unix.SCHED_IDLE
	}
	if err := unix.SchedSetAttr(t.tid, &attr, 0); err != nil {
		return fmt.Errorf("set flow reader thread %d to %s: %w", t.tid, c.describe(t.nice), err)
	}
	return nil
}

// checkIdleExit says whether a thread at nice may leave SCHED_IDLE: first by the
// rules (capability, RLIMIT_NICE), then by doing it on a throwaway thread, which
// also answers for what the rules miss (a user namespace, seccomp, an LSM).
func checkIdleExit(nice int) error {
	var rlim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NICE, &rlim); err != nil {
		return fmt.Errorf("read RLIMIT_NICE: %w", err)
	}
	if err := idleExitAllowed(hasSysNice(), rlim.Cur, nice); err != nil {
		return err
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		t := &readerThread{tid: unix.Gettid(), nice: nice}
		err := t.set(readerIdle)
		if err == nil {
			err = t.set(readerNice)
		}
		done <- err
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("try SCHED_IDLE and back on a spare thread: %w", err)
	}
	return nil
}

// hasSysNice says whether the agent's effective capabilities hold CAP_SYS_NICE.
func hasSysNice() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[capSysNice/32].Effective&(1<<(capSysNice%32)) != 0
}
