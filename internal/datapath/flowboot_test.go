package datapath

import (
	"testing"
	"time"
)

// The reader reads the boot time (a system call) again only once its reading is
// bootRefresh old, however many records and polls come in between.
func TestBootClockReadsOncePerRefresh(t *testing.T) {
	reads := 0
	c := bootClock{read: func() time.Time {
		reads++
		return time.Unix(int64(reads), 0)
	}}
	start := time.Unix(1000, 0)
	for i := range 100 {
		now := start.Add(time.Duration(i) * bootRefresh / 100)
		if got := c.get(now); got != time.Unix(1, 0) {
			t.Fatalf("get at %v = %v, want the first reading", now.Sub(start), got)
		}
	}
	if reads != 1 {
		t.Fatalf("%d readings within %v, want 1", reads, bootRefresh)
	}
	if got := c.get(start.Add(bootRefresh)); got != time.Unix(2, 0) || reads != 2 {
		t.Errorf("get at %v = %v after %d readings, want a second reading", bootRefresh, got, reads)
	}
	if got := c.get(start.Add(bootRefresh + time.Millisecond)); got != time.Unix(2, 0) {
		t.Errorf("get right after the second reading = %v, want it", got)
	}
}

func BenchmarkBootTime(b *testing.B) {
	for b.Loop() {
		_ = bootTime()
	}
}
