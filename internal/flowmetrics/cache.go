package flowmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// counterCacheMax bounds a counterCache; past it, label sets are looked up in their
// vector each time (the vector's own series stay bounded as labels.go says).
const counterCacheMax = 4096

// counterKey is one label set of one vector: up to three label values, or a
// protocol and port whose label portSet decides once.
type counterKey struct {
	vec     *prometheus.CounterVec
	a, b, c string
	port    uint16
}

// counterCache keeps the counters of label sets already seen, so counting a flow
// costs a map lookup instead of the vector's label hashing and validation: the
// agent counts every flow record (several per new connection). Not safe for
// concurrent use (the Sink's lock guards it).
//
// The label sets counted most (a few flow types and verdicts, the busy ports) are
// also kept in hot, searched first by comparison: label values are mostly the same
// constant strings, which compare equal at their pointer, where the map hashed
// every byte of three strings per lookup (a fifth of the agent's time per record).
// A hot label set counts in a plain integer, added to its counter by flush (at the
// end of each batch) or when the slot is taken by another label set.
type counterCache struct {
	m       map[counterKey]prometheus.Counter
	hot     [counterCacheHot]hotCounter
	hotNext int // the hot slot the next miss replaces
}

// counterCacheHot is how many label sets hot keeps: more than a steady flow mix
// uses (flow type × verdict, a protocol's busy ports) and few enough to scan.
const counterCacheHot = 16

type hotCounter struct {
	k   counterKey
	ctr prometheus.Counter
	n   uint64 // counted since the last flush
}

// count counts one for k, whose counter mk makes the first time.
func (c *counterCache) count(k counterKey, mk func() prometheus.Counter) {
	for i := range c.hot {
		if h := &c.hot[i]; h.ctr != nil && h.k == k {
			h.n++
			return
		}
	}
	ctr, ok := c.m[k]
	if !ok {
		ctr = mk()
		if c.m == nil {
			c.m = map[counterKey]prometheus.Counter{}
		}
		if len(c.m) < counterCacheMax {
			c.m[k] = ctr
		}
	}
	h := &c.hot[c.hotNext]
	if h.n > 0 {
		h.ctr.Add(float64(h.n))
	}
	*h = hotCounter{k: k, ctr: ctr, n: 1}
	c.hotNext = (c.hotNext + 1) % counterCacheHot
}

// inc counts one for vec's counter of labels (one to three values).
func (c *counterCache) inc(vec *prometheus.CounterVec, labels ...string) {
	k := counterKey{vec: vec}
	switch len(labels) {
	case 3:
		k.c = labels[2]
		fallthrough
	case 2:
		k.b = labels[1]
		fallthrough
	case 1:
		k.a = labels[0]
	}
	c.count(k, func() prometheus.Counter { return vec.WithLabelValues(labels...) })
}

// flush adds what the hot label sets counted to their counters.
func (c *counterCache) flush() {
	for i := range c.hot {
		if h := &c.hot[i]; h.n > 0 {
			h.ctr.Add(float64(h.n))
			h.n = 0
		}
	}
}
