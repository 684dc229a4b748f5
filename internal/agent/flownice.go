package agent

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// flowReaderNice and flowReaderSlice are how the thread that reads the datapath's flow
// ring (and converts, stores and counts its records) is scheduled. Flows are telemetry
// about the pods' traffic: with the pods' processes busy on every vCPU (a TCP_CRR client
// and server on the two vCPUs of a small node), a reader at their priority took its time
// from them (docs/observability.md, "What it costs"). At nice 10 it gets about a tenth of
// a contended vCPU, several times what a record stream at the ring's rate needs; past
// that the ring fills and records are counted lost (FLOWS_LOST), never the packets
// slowed. The short slice (EEVDF, Linux 6.12+; older kernels ignore it) lets a waking
// pod process preempt a reader that is draining a batch within 0.1 ms instead of the
// scheduler's default slice of a few milliseconds.
const (
	flowReaderNice  = 10
	flowReaderSlice = 100 * time.Microsecond
)

// lowerFlowReaderPriority locks the calling goroutine to its OS thread and gives that
// thread flowReaderNice (unless its nice value is that or higher already: raising it
// needs no privilege) and flowReaderSlice. sched_setattr with pid 0 changes the calling
// thread only. The thread is never handed back to the Go runtime (no UnlockOSThread):
// it exits with the goroutine, so no other goroutine ever runs at this priority.
func lowerFlowReaderPriority() error {
	runtime.LockOSThread()
	cur, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return fmt.Errorf("read flow reader scheduling: %w", err)
	}
	if cur.Policy != unix.SCHED_NORMAL {
		return nil // batch, idle or real-time: chosen by whoever started the agent
	}
	attr := unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: max(cur.Nice, flowReaderNice), Runtime: uint64(flowReaderSlice)}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("set flow reader scheduling (nice %d, slice %v): %w", attr.Nice, flowReaderSlice, err)
	}
	return nil
}
