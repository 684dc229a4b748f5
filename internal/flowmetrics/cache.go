package flowmetrics

import (
	"sync"

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
// agent counts every flow record (several per new connection). Safe for
// concurrent use.
//
// The label sets counted most (a few flow types and verdicts, the busy ports) are
// also kept in hot, searched first by comparison: label values are mostly the same
// constant strings, which compare equal at their pointer, where the map hashed
// every byte of three strings per lookup (a fifth of the agent's time per record).
type counterCache struct {
	mu      sync.Mutex
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
}

// get returns k's counter, made by mk the first time.
func (c *counterCache) get(k counterKey, mk func() prometheus.Counter) prometheus.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.hot {
		if h := &c.hot[i]; h.ctr != nil && h.k == k {
			return h.ctr
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
	c.hot[c.hotNext] = hotCounter{k: k, ctr: ctr}
	c.hotNext = (c.hotNext + 1) % counterCacheHot
	return ctr
}

// inc increments vec's counter of labels (one to three values).
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
	c.get(k, func() prometheus.Counter { return vec.WithLabelValues(labels...) }).Inc()
}
