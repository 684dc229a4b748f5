package metrics

import (
	"log/slog"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
)

// MapStatsMaxAge is how long one count of the datapath's maps answers scrapes: a
// scrape within it of the last count reports that count (bpf_map_* are then up to
// this old), so any number of scrapers, however often they come, cost one count
// per MapStatsMaxAge. Prometheus scrapes every 15 s or more and never sees a
// repeated count.
const MapStatsMaxAge = 5 * time.Second

// mapLogEvery is how often a map that keeps failing to be counted is logged at most.
const mapLogEvery = time.Minute

// The log messages of a map's count failing and working again.
const (
	mapFailedMsg    = "count a BPF map: its metrics keep the last full count"
	mapRecoveredMsg = "counting a BPF map works again"
)

// MapSample is one map's fill as a scrape reports it.
type MapSample struct {
	// MapStat is the map's last full count, or while it has never had one, the
	// last partial count (Entries a lower bound, Err set).
	datapath.MapStat
	// ReadErrors are the counts of this map that failed since the agent started.
	ReadErrors uint64
	// Failing is whether the last count failed (its error in the agent log).
	Failing bool
}

// MapCache counts the datapath's maps for scrapes: concurrent scrapes share one
// count, a count answers scrapes for maxAge, and a map whose count fails keeps
// its last full count while the failure is counted and logged. Safe for
// concurrent use.
type MapCache struct {
	count  func() []datapath.MapStat // datapath.MapStats
	maxAge time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu       sync.Mutex
	samples  []MapSample
	at       time.Time             // when samples were counted
	counting chan struct{}         // closed when the count under way ends; nil when none is
	byName   map[string]*mapRecord // every map ever counted
}

// mapRecord is what MapCache keeps of one map between counts.
type mapRecord struct {
	good   bool             // last is a full count
	last   datapath.MapStat // the last full count, else the last partial one; Err: the last count failed
	errors uint64           // failed counts
	logged time.Time        // the last failure log
}

// NewMapCache returns a cache over count (datapath.MapStats), whose counts
// answer scrapes for maxAge (MapStatsMaxAge) and whose failures go to log.
func NewMapCache(count func() []datapath.MapStat, maxAge time.Duration, log *slog.Logger) *MapCache {
	return &MapCache{count: count, maxAge: maxAge, now: time.Now, log: log, byName: map[string]*mapRecord{}}
}

// Samples returns the maps' fill: the last count if it is younger than maxAge,
// else the count under way (waited for) or a new one.
func (c *MapCache) Samples() []MapSample {
	c.mu.Lock()
	if c.samples != nil && c.now().Sub(c.at) < c.maxAge {
		defer c.mu.Unlock()
		return c.samples
	}
	if done := c.counting; done != nil {
		c.mu.Unlock()
		<-done
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.samples
	}
	done := make(chan struct{})
	c.counting = done
	c.mu.Unlock()
	defer func() { // also when count panics: the next scrape counts again
		c.mu.Lock()
		defer c.mu.Unlock()
		c.counting = nil
		close(done)
	}()
	stats := c.count()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples, c.at = c.merge(stats), c.now()
	return c.samples
}

// merge records a count and returns what scrapes report of it. The caller holds mu.
func (c *MapCache) merge(stats []datapath.MapStat) []MapSample {
	out := make([]MapSample, 0, len(stats))
	for _, s := range stats {
		r := c.byName[s.Name]
		if r == nil {
			r = &mapRecord{}
			c.byName[s.Name] = r
		}
		c.record(r, s)
		out = append(out, MapSample{MapStat: r.last, ReadErrors: r.errors, Failing: r.last.Err != nil})
	}
	return out
}

// record folds one map's count into r, logging a failure when it starts and
// every mapLogEvery while it lasts, and the recovery.
func (c *MapCache) record(r *mapRecord, s datapath.MapStat) {
	if s.Err == nil {
		if r.last.Err != nil && c.log != nil {
			c.log.Info(mapRecoveredMsg, "map", s.Name, "failures", r.errors)
		}
		r.good, r.last = true, s
		return
	}
	r.errors++
	failing := r.last.Err != nil // already before this count
	if !r.good {
		r.last = s // no full count yet: report the partial one
	} else {
		r.last.Max = s.Max
	}
	r.last.Err = s.Err
	now := c.now()
	if c.log != nil && (!failing || now.Sub(r.logged) >= mapLogEvery) {
		c.log.Warn(mapFailedMsg, "map", s.Name, "err", s.Err,
			"failures", r.errors, "reported", r.last.Entries, "fullCount", r.good)
		r.logged = now
	}
}
