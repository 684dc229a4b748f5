package clusterhealth

import (
	"testing"
	"time"
)

// The interval is the base for small clusters and grows by PerPeer per peer beyond
// 100 peers; at 1,000 nodes (999 peers) a round is 99.9 s, i.e. 10 peers a second.
func TestInterval(t *testing.T) {
	for _, c := range []struct {
		peers int
		want  time.Duration
	}{
		{0, 10 * time.Second}, {2, 10 * time.Second}, {100, 10 * time.Second},
		{101, 10100 * time.Millisecond}, {999, 99900 * time.Millisecond}, {4999, 499900 * time.Millisecond},
	} {
		got := Interval(c.peers)
		if got != c.want {
			t.Errorf("Interval(%d) = %v, want %v", c.peers, got, c.want)
		}
		if c.peers > 0 && float64(c.peers)/got.Seconds() > 10.0001 {
			t.Errorf("Interval(%d) = %v: more than 10 peers a second", c.peers, got)
		}
	}
}

// Jitter keeps a round within ±10% of the interval; peers are spread evenly.
func TestJitterAndOffsets(t *testing.T) {
	d := 10 * time.Second
	if lo, hi := jittered(d, 0), jittered(d, 0.999999); lo != 9*time.Second || hi < 10999*time.Millisecond || hi > 11*time.Second {
		t.Errorf("jittered(10s) spans %v..%v, want 9s..11s", lo, hi)
	}
	for i := 0; i < 100; i++ {
		if r := roundLength(3); r < 9*time.Second || r > 11*time.Second {
			t.Fatalf("roundLength(3) = %v, outside 9s..11s", r)
		}
	}
	if got := []time.Duration{offset(d, 0, 4), offset(d, 1, 4), offset(d, 3, 4), offset(d, 0, 0)}; got[0] != 0 || got[1] != 2500*time.Millisecond || got[2] != 7500*time.Millisecond || got[3] != 0 {
		t.Errorf("offsets = %v, want 0, 2.5s, 7.5s, 0", got)
	}
}
