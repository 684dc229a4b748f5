package sysdump

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bad limit is refused with the flag, the value and what is allowed.
func TestCheckFlags(t *testing.T) {
	for _, c := range []struct {
		entries, logBytes int
		dropsFor          time.Duration
		want              []string // in the error; none: accepted
	}{
		{100, 1 << 20, 3 * time.Second, nil},
		{0, 1, MaxDropsFor, nil},
		{-1, 1 << 20, 3 * time.Second, []string{"--map-entries -1", "0", "or more"}},
		{100, -5, 3 * time.Second, []string{"--log-bytes -5", "1 or more"}},
		{100, 0, 3 * time.Second, []string{"--log-bytes 0", "1 or more"}},
		{100, 1 << 20, -time.Second, []string{"--drops-for -1s", "above 0", "at most 5m0s"}},
		{100, 1 << 20, 0, []string{"--drops-for 0s", "above 0"}},
		{100, 1 << 20, 24 * time.Hour, []string{"--drops-for 24h0m0s", "at most 5m0s"}},
	} {
		err := CheckFlags(c.entries, c.logBytes, c.dropsFor)
		if c.want == nil {
			if err != nil {
				t.Errorf("CheckFlags(%d, %d, %v) = %v, want accepted", c.entries, c.logBytes, c.dropsFor, err)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("CheckFlags(%d, %d, %v) = %v, want an error with %q", c.entries, c.logBytes, c.dropsFor, err, w)
			}
		}
	}
}

// --map-entries 0 keeps no entries, only each map's size (it used to mean 100).
func TestMapEntriesZero(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{fakeNode{"n1"}}, Output: out, MapEntries: 0}); err != nil {
		t.Fatal(err)
	}
	for name, body := range readArchive(t, out) {
		if strings.HasSuffix(name, "/nodes/n1/maps/myelin_endpoints.json") {
			var m MapDump
			if err := json.Unmarshal([]byte(body), &m); err != nil || m.Total != 5 || m.Shown != 0 {
				t.Errorf("map dump %s (%v): want total 5, none shown", body, err)
			}
			return
		}
	}
	t.Error("no map dump in the archive")
}
