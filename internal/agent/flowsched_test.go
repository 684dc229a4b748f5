package agent

import "testing"

// TestNextReaderClass: an idle reader is lifted once half the ring is waiting, a
// lifted one goes idle again once a sixteenth or less is; in between each keeps its
// class (hysteresis: no flapping around one threshold).
func TestNextReaderClass(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name       string
		cur        readerClass
		used, size int
		want       readerClass
	}{
		{"idle, ring empty", readerIdle, 0, size, readerIdle},
		{"idle, woken at a quarter", readerIdle, size / 4, size, readerIdle},
		{"idle, just under half", readerIdle, size/2 - 1, size, readerIdle},
		{"idle, half full", readerIdle, size / 2, size, readerNice},
		{"idle, full", readerIdle, size, size, readerNice},
		{"lifted, still over a sixteenth", readerNice, size/16 + 1, size, readerNice},
		{"lifted, a quarter", readerNice, size / 4, size, readerNice},
		{"lifted, down to a sixteenth", readerNice, size / 16, size, readerIdle},
		{"lifted, drained", readerNice, 0, size, readerIdle},
		{"no ring size: keep", readerIdle, 10, 0, readerIdle},
		{"no ring size, lifted: keep", readerNice, 0, 0, readerNice},
	} {
		if got := nextReaderClass(tc.cur, tc.used, tc.size); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got.describe(10), tc.want.describe(10))
		}
	}
}

// TestIdleExitAllowed: leaving SCHED_IDLE for nice n takes CAP_SYS_NICE or an
// RLIMIT_NICE of at least 20 - n.
func TestIdleExitAllowed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sysNice bool
		rlim    uint64
		nice    int
		ok      bool
	}{
		{"CAP_SYS_NICE", true, 0, 10, true},
		{"default rlimit 0", false, 0, 10, false},
		{"rlimit 9 for nice 10", false, 9, 10, false},
		{"rlimit 10 for nice 10", false, 10, 10, true},
		{"rlimit 5 for nice 15", false, 5, 15, true},
		{"rlimit unlimited", false, ^uint64(0), 10, true},
	} {
		err := idleExitAllowed(tc.sysNice, tc.rlim, tc.nice)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want allowed %v", tc.name, err, tc.ok)
		}
	}
}
