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
type counterCache struct {
	mu sync.Mutex
	m  map[counterKey]prometheus.Counter
}

// get returns k's counter, made by mk the first time.
func (c *counterCache) get(k counterKey, mk func() prometheus.Counter) prometheus.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctr, ok := c.m[k]; ok {
		return ctr
	}
	ctr := mk()
	if c.m == nil {
		c.m = map[counterKey]prometheus.Counter{}
	}
	if len(c.m) < counterCacheMax {
		c.m[k] = ctr
	}
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
