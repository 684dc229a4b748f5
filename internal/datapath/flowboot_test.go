package datapath

import (
	"testing"
	"time"
)

// The reader reads the boot time (a system call) once per bootRefresh records and
// after each poll, not once per record.
func TestBootClockReadsOncePerBatch(t *testing.T) {
	reads := 0
	c := bootClock{read: func() time.Time {
		reads++
		return time.Unix(int64(reads), 0)
	}}
	for range bootRefresh {
		if got := c.get(); got != time.Unix(1, 0) {
			t.Fatalf("get = %v, want the first reading", got)
		}
	}
	if reads != 1 {
		t.Fatalf("%d readings for %d records, want 1", reads, bootRefresh)
	}
	if got := c.get(); got != time.Unix(2, 0) || reads != 2 {
		t.Errorf("record %d: get = %v after %d readings, want a second reading", bootRefresh+1, got, reads)
	}
	c.expire() // a poll
	if got := c.get(); got != time.Unix(3, 0) {
		t.Errorf("after expire: get = %v, want a fresh reading", got)
	}
}

func BenchmarkBootTime(b *testing.B) {
	for b.Loop() {
		_ = bootTime()
	}
}
