package agent

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// readerClass is how the flow reader's thread is scheduled.
type readerClass uint32

const (
	// readerIdle is SCHED_IDLE: the thread runs on vCPU time no other task wants, and
	// any waking task preempts it. With client and server of a TCP_CRR on both vCPUs of
	// a 2-vCPU node, nice 10 alone still cost that case 7-10% of its connections per
	// second (docs/observability.md, "What it costs").
	readerIdle readerClass = iota
	// readerNice is SCHED_OTHER at the reader's nice value (flowReaderNice): about a
	// tenth of a contended vCPU, so an idle reader that fell behind catches up.
	readerNice
)

func (c readerClass) describe(nice int) string {
	if c == readerIdle {
		return "SCHED_IDLE"
	}
	return fmt.Sprintf("nice %d", nice)
}

// The reader guard's pace and thresholds, in parts of the ring. The datapath wakes the
// reader at a quarter of the ring (FLOWS_WAKEUP_BYTES, bpf/lib/flows.h); an idle reader
// that gets no vCPU time lets it fill on, and at half the guard lifts it to nice until
// it is down to a sixteenth. At the fastest record rate measured here (~50,000 records/s
// of 64 bytes with their headers, 3 MB/s) the 1 MiB ring goes from half to full in
// ~170 ms, more than a tick; past full, records are counted FLOWS_LOST, never packets
// slowed.
const (
	flowGuardTick = 100 * time.Millisecond
	liftFill      = 2  // lift at 1/liftFill of the ring or more
	settleFill    = 16 // go idle again at 1/settleFill or less
)

// nextReaderClass is the reader's class for the next tick, given its class now and the
// ring's fill: used of size bytes hold records not read yet.
func nextReaderClass(cur readerClass, used, size int) readerClass {
	switch {
	case size <= 0:
		return cur
	case cur == readerIdle && used*liftFill >= size:
		return readerNice
	case cur == readerNice && used*settleFill <= size:
		return readerIdle
	}
	return cur
}

// idleExitAllowed says whether a thread at nice may go from SCHED_IDLE back to
// SCHED_OTHER, with sysNice (CAP_SYS_NICE) and the RLIMIT_NICE soft limit rlimNice:
// the kernel treats SCHED_IDLE as below nice 19 and lets a thread leave it only as
// far as RLIMIT_NICE would let it lower its nice value, to 20 - rlimNice
// (sched_setattr(2), setrlimit(2)). Without that, an idle reader could never be lifted.
func idleExitAllowed(sysNice bool, rlimNice uint64, nice int) error {
	need := uint64(20 - nice)
	if sysNice || rlimNice >= need {
		return nil
	}
	return fmt.Errorf("the agent has no CAP_SYS_NICE and RLIMIT_NICE %d (below %d): a thread at nice %d could not leave SCHED_IDLE", rlimNice, need, nice)
}

// readerGuard keeps the flow reader's thread idle while it keeps up with the ring, and
// lifts it to nice while the ring fills (nextReaderClass), checking every
// flowGuardTick. Without a thread that may go idle (thread.idleErr) it leaves the
// thread at nice.
type readerGuard struct {
	thread *readerThread
	fill   func() (used, size int) // the ring's fill (datapath.FlowReader.Fill)
	log    *slog.Logger

	class  atomic.Uint32 // readerClass
	lifts  atomic.Uint64
	failed bool // a class change failed and was logged; used by run only
}

func newReaderGuard(t *readerThread, fill func() (used, size int), log *slog.Logger) *readerGuard {
	g := &readerGuard{thread: t, fill: fill, log: log}
	g.class.Store(uint32(readerNice))
	return g
}

// start puts the thread idle and starts the guard; stop ends the guard and returns
// once it will not touch the thread again (its thread id must not outlive it). The
// thread stays at nice without idle use (thread.idleErr, or an error putting it idle,
// which start records there).
func (g *readerGuard) start() (stop func()) {
	if !g.goIdle() {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(flowGuardTick)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				g.step()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// goIdle puts the thread idle if it may go idle, and says whether it did.
func (g *readerGuard) goIdle() bool {
	if g.thread.idleErr != nil {
		return false
	}
	if err := g.thread.set(readerIdle); err != nil {
		g.thread.idleErr = err
		return false
	}
	g.class.Store(uint32(readerIdle))
	return true
}

// step moves the thread to its next class.
func (g *readerGuard) step() {
	cur := readerClass(g.class.Load())
	used, size := g.fill()
	next := nextReaderClass(cur, used, size)
	if next == cur {
		return
	}
	if err := g.thread.set(next); err != nil {
		if !g.failed { // once: it is tried again every tick
			g.log.Warn("flow reader scheduling stays as it is", "ringUsed", used, "ringSize", size, "err", err)
			g.failed = true
		}
		return
	}
	g.class.Store(uint32(next))
	if next == readerNice {
		g.lifts.Add(1)
	}
}

// status is the reader's scheduling for GET /v1/status.
func (g *readerGuard) status() string {
	nice := g.thread.nice
	if g.thread.idleErr != nil {
		return fmt.Sprintf("reader thread at nice %d, not SCHED_IDLE: %v", nice, g.thread.idleErr)
	}
	return fmt.Sprintf("reader thread SCHED_IDLE, lifted to nice %d while the ring is over 1/%d full (%d times; now %s)",
		nice, liftFill, g.lifts.Load(), readerClass(g.class.Load()).describe(nice))
}
