package flowmetrics

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCounterCache: counts through the cache land in the vector's series, also for
// label sets past the cache's bound (looked up each time, not kept).
func TestCounterCache(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	var c counterCache
	n := counterCacheMax + 10
	for i := range n {
		c.inc(vec, "k", strconv.Itoa(i))
	}
	c.inc(vec, "k", "0")
	c.inc(vec, "k", strconv.Itoa(n-1))
	if len(c.m) != counterCacheMax {
		t.Errorf("cache holds %d label sets, want its bound %d", len(c.m), counterCacheMax)
	}
	for label, want := range map[string]float64{"0": 2, "1": 1, strconv.Itoa(n - 1): 2} {
		if got := testutil.ToFloat64(vec.WithLabelValues("k", label)); got != want {
			t.Errorf("b=%s: %v, want %v", label, got, want)
		}
	}
}
