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
	c.flush()
	if len(c.m) != counterCacheMax {
		t.Errorf("cache holds %d label sets, want its bound %d", len(c.m), counterCacheMax)
	}
	for label, want := range map[string]float64{"0": 2, "1": 1, strconv.Itoa(n - 1): 2} {
		if got := testutil.ToFloat64(vec.WithLabelValues("k", label)); got != want {
			t.Errorf("b=%s: %v, want %v", label, got, want)
		}
	}
}

// TestCounterCacheHot: label sets cycling through more than the hot slots, from strings
// built each time (equal content, other pointers), each count in its own series (what
// a slot counted is added when another label set takes it, the rest at flush), and
// two vectors with the same label values apart.
func TestCounterCacheHot(t *testing.T) {
	vecA := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "a"}, []string{"l"})
	vecB := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "b_total", Help: "b"}, []string{"l"})
	var c counterCache
	sets := counterCacheHot + 3
	for round := range 5 {
		for i := range sets {
			c.inc(vecA, strconv.Itoa(i))
			if i%2 == round%2 {
				c.inc(vecB, strconv.Itoa(i))
			}
		}
	}
	if got := testutil.ToFloat64(vecA.WithLabelValues(strconv.Itoa(sets - 1))); got >= 5 {
		t.Errorf("a{l=%d} = %v before the flush, want the last round still counted in its hot slot", sets-1, got)
	}
	c.flush()
	for i := range sets {
		l := strconv.Itoa(i)
		if got := testutil.ToFloat64(vecA.WithLabelValues(l)); got != 5 {
			t.Errorf("a{l=%s} = %v, want 5", l, got)
		}
		want := 3.0 // rounds 0, 2, 4 for even i
		if i%2 == 1 {
			want = 2
		}
		if got := testutil.ToFloat64(vecB.WithLabelValues(l)); got != want {
			t.Errorf("b{l=%s} = %v, want %v", l, got, want)
		}
	}
}
