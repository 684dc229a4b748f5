package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

func TestNATWarnings(t *testing.T) {
	fills := []datapath.MapFill{
		{Name: "myelin_endpoints", Entries: 1024, Max: 1024},
		{Name: "myelin_snat", Entries: 10, Max: 100},
		{Name: "myelin_nodeport_syn", Entries: 62, Max: 64},
		{Name: "myelin_nodeport_nat", Entries: 90, Max: 100},
	}
	got := natWarnings(fills)
	if len(got) != 2 || !strings.HasPrefix(got[0], "myelin_nodeport_syn is 96% full (62/64): new NodePort flows evict") ||
		!strings.Contains(got[1], "DROP_NODEPORT_NAT_FULL") {
		t.Errorf("natWarnings = %q, want the two NodePort tables", got)
	}
	info := nodePortInfo(datapath.NodePortStats{Created: 5000, Promoted: 3, UDPAnswered: 11, RepliesLost: 7, Embryonic: 62 / 2})
	if want := (api.NodePortNATInfo{Created: 5000, Promoted: 3, UDPAnswered: 11, Evicted: 5000 - 3 - 11 - 31, RepliesLost: 7}); *info != want {
		t.Errorf("nodePortInfo = %+v, want %+v", *info, want)
	}
}

func TestEvictionSamples(t *testing.T) {
	var e evictionSamples
	t0 := time.Unix(1000, 0)
	if n := e.since(t0, 50); n != 0 {
		t.Errorf("without samples: %d, want 0", n)
	}
	e.add(t0, 100)
	e.add(t0.Add(10*time.Second), 100)
	if n := e.since(t0.Add(15*time.Second), 100); n != 0 {
		t.Errorf("no new evictions: %d, want 0", n)
	}
	if n := e.since(t0.Add(15*time.Second), 5100); n != 5000 {
		t.Errorf("5,000 new evictions: %d, want 5000", n)
	}
	for i := 2; i <= 9; i++ {
		e.add(t0.Add(time.Duration(i)*10*time.Second), 5100)
	}
	if n := e.since(t0.Add(95*time.Second), 5100); n != 0 {
		t.Errorf("evictions older than the window: %d, want 0", n)
	}
}
