package agent

import (
	"sync"

	"github.com/myelin-net/myelin/internal/metrics"
)

// gcStats counts the datapath GC's rounds and removed entries per table, for the
// metrics endpoint (the GC loop writes, scrapes read).
type gcStats struct {
	mu     sync.Mutex
	order  []string
	tables map[string]*metrics.GCStat
}

// add records one round over table that removed n entries.
func (g *gcStats) add(table string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.tables == nil {
		g.tables = map[string]*metrics.GCStat{}
	}
	t, ok := g.tables[table]
	if !ok {
		t = &metrics.GCStat{Table: table}
		g.tables[table] = t
		g.order = append(g.order, table)
	}
	t.Runs++
	if n > 0 {
		t.Removed += uint64(n)
	}
}

// snapshot returns every table's counts in the order they first ran.
func (g *gcStats) snapshot() []metrics.GCStat {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]metrics.GCStat, 0, len(g.order))
	for _, t := range g.order {
		out = append(out, *g.tables[t])
	}
	return out
}
