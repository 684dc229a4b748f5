package agent

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// flowReaderNice is the nice value of the thread that reads the datapath's flow ring
// and converts, stores and counts its records. Flows are telemetry about the pods'
// traffic: with the pods' processes busy on every vCPU (a TCP_CRR client and server on
// the two vCPUs of a small node), a reader at their priority took its time from them
// (docs/observability.md, "What it costs"). At nice 10 the scheduler runs it when a vCPU
// idles and gives it about a tenth of a contended one, several times what a record
// stream at the ring's rate needs; past that the ring fills and records are counted
// lost (FLOWS_LOST), never the packets slowed.
const flowReaderNice = 10

// lowerFlowReaderPriority locks the calling goroutine to its OS thread and raises that
// thread's nice value to flowReaderNice, unless it is that or higher already (Linux:
// setpriority on a thread id changes that thread only; raising a nice value needs no
// privilege). The thread is never handed
// back to the Go runtime (no UnlockOSThread): it exits with the goroutine, so no other
// goroutine ever runs at this priority.
func lowerFlowReaderPriority() error {
	runtime.LockOSThread()
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid()) // the kernel's 20 - nice
	if err != nil {
		return fmt.Errorf("read flow reader priority: %w", err)
	}
	if 20-prio >= flowReaderNice {
		return nil
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), flowReaderNice); err != nil {
		return fmt.Errorf("lower flow reader priority: %w", err)
	}
	return nil
}
