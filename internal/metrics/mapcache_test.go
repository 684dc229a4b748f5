package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/testenv"
)

// fakeCounter stands for datapath.MapStats: each count returns the next of
// results (the last again once they run out) and can be held until release.
type fakeCounter struct {
	results [][]datapath.MapStat
	hold    chan struct{} // when set, a count waits for it to close
	counts  atomic.Int32
	waiting atomic.Int32 // counts started
}

func (f *fakeCounter) count() []datapath.MapStat {
	f.waiting.Add(1)
	if f.hold != nil {
		<-f.hold
	}
	n := int(f.counts.Add(1))
	return f.results[min(n, len(f.results))-1]
}

func stat(name string, entries int, err error) datapath.MapStat {
	return datapath.MapStat{Name: name, Kind: datapath.MapKindNAT, Entries: entries, Max: 100, Err: err}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestCache(f *fakeCounter) (*MapCache, *fakeClock) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	c := NewMapCache(f.count, MapStatsMaxAge, nil)
	c.now = clock.now
	return c, clock
}

// Ten scrapes at once, while a count is under way, share that one count.
func TestMapCacheSharesOneCount(t *testing.T) {
	f := &fakeCounter{results: [][]datapath.MapStat{{stat("myelin_snat", 7, nil)}}, hold: make(chan struct{})}
	c, _ := newTestCache(f)
	var wg sync.WaitGroup
	got := make([][]MapSample, 10)
	for i := range got {
		wg.Go(func() { got[i] = c.Samples() })
	}
	testenv.WaitFor(t, "a count to start", func() bool { return f.waiting.Load() > 0 })
	time.Sleep(10 * time.Millisecond) // let the other scrapes reach the cache (they must wait, not count)
	close(f.hold)
	wg.Wait()
	if n := f.counts.Load(); n != 1 {
		t.Errorf("10 concurrent scrapes counted the maps %d times, want 1", n)
	}
	for i, s := range got {
		if len(s) != 1 || s[0].Entries != 7 {
			t.Errorf("scrape %d got %+v, want the one count (7 entries)", i, s)
		}
	}
}

// A count answers scrapes for MapStatsMaxAge; the first scrape after it counts again.
func TestMapCacheReusesACountForMaxAge(t *testing.T) {
	f := &fakeCounter{results: [][]datapath.MapStat{{stat("myelin_snat", 1, nil)}, {stat("myelin_snat", 2, nil)}}}
	c, clock := newTestCache(f)
	for range 5 {
		c.Samples()
		clock.add(MapStatsMaxAge / 5)
	}
	if n := f.counts.Load(); n != 1 {
		t.Fatalf("5 scrapes within MapStatsMaxAge counted %d times, want 1", n)
	}
	if s := c.Samples(); f.counts.Load() != 2 || s[0].Entries != 2 {
		t.Errorf("a scrape MapStatsMaxAge after the count got %+v after %d counts, want a new count (2 entries)", s, f.counts.Load())
	}
}

// A map whose count fails keeps its last full count and is marked failing, its
// failures counted; the other maps are reported as counted. A map that never had
// a full count reports its partial one. Once a count works again, it is reported.
func TestMapCacheKeepsLastGoodCount(t *testing.T) {
	aborted := fmt.Errorf("count myelin_snat: %w", errors.New("iteration aborted"))
	f := &fakeCounter{results: [][]datapath.MapStat{
		{stat("myelin_snat", 50, nil), stat("myelin_policy_ct", 3, errors.New("permission denied"))},
		{stat("myelin_snat", 12, aborted), stat("myelin_policy_ct", 4, errors.New("permission denied"))},
		{stat("myelin_snat", 60, aborted), stat("myelin_policy_ct", 5, nil)},
		{stat("myelin_snat", 61, nil), stat("myelin_policy_ct", 6, nil)},
	}}
	c, clock := newTestCache(f)
	want := [][2]MapSample{
		{{MapStat: stat("myelin_snat", 50, nil)},
			{MapStat: stat("myelin_policy_ct", 3, errors.New("permission denied")), ReadErrors: 1, Failing: true}},
		{{MapStat: stat("myelin_snat", 50, aborted), ReadErrors: 1, Failing: true},
			{MapStat: stat("myelin_policy_ct", 4, errors.New("permission denied")), ReadErrors: 2, Failing: true}},
		{{MapStat: stat("myelin_snat", 50, aborted), ReadErrors: 2, Failing: true},
			{MapStat: stat("myelin_policy_ct", 5, nil), ReadErrors: 2}},
		{{MapStat: stat("myelin_snat", 61, nil), ReadErrors: 2},
			{MapStat: stat("myelin_policy_ct", 6, nil), ReadErrors: 2}},
	}
	for i, w := range want {
		got := c.Samples()
		clock.add(MapStatsMaxAge)
		if len(got) != 2 {
			t.Fatalf("count %d: %+v, want 2 maps", i+1, got)
		}
		for j := range got {
			g, w := got[j], w[j]
			if g.Name != w.Name || g.Entries != w.Entries || g.ReadErrors != w.ReadErrors || g.Failing != w.Failing ||
				(g.Err == nil) != (w.Err == nil) {
				t.Errorf("count %d: %s = %d entries, %d errors, failing %v (err %v); want %d, %d, %v",
					i+1, g.Name, g.Entries, g.ReadErrors, g.Failing, g.Err, w.Entries, w.ReadErrors, w.Failing)
			}
		}
	}
}

// logLines records the messages logged to it.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}

// A map that keeps failing is logged when it starts failing, then once a minute
// at most (not once a count), and once when it works again.
func TestMapCacheLogsFailuresRateLimited(t *testing.T) {
	failed := []datapath.MapStat{stat("myelin_snat", 1, errors.New("iteration aborted"))}
	f := &fakeCounter{results: [][]datapath.MapStat{failed, failed, failed, failed, failed, {stat("myelin_snat", 2, nil)}}}
	logs := &logLines{}
	c, clock := newTestCache(f)
	c.log = slog.New(logs)
	for range 5 { // 5 failed counts over 4 × 20 s
		c.Samples()
		clock.add(20 * time.Second)
	}
	c.Samples()
	want := []string{"WARN " + mapFailedMsg, "WARN " + mapFailedMsg, "INFO " + mapRecoveredMsg}
	if !slices.Equal(logs.msgs, want) {
		t.Errorf("logged %q, want %q", logs.msgs, want)
	}
}
