package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// The table shows one row a peer: states via node and pod network, latencies, since
// when (a failing peer: its first failing path), and the latest failure with its path.
func TestPrintHealth(t *testing.T) {
	now := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	ok := func(since time.Duration, lat float64) api.PathHealth {
		return api.PathHealth{State: api.PathOK, Since: now.Add(-since), LatencySeconds: lat}
	}
	fail := func(since, last time.Duration, err string) api.PathHealth {
		return api.PathHealth{State: api.PathFailing, Since: now.Add(-since), LastFailure: now.Add(-last), LastError: err}
	}
	m := api.HealthMatrix{Node: "n1", Interval: "10s", Port: 4240, HealthIP: "10.244.0.1", Peers: []api.PeerHealth{
		{Name: "n2", NodeIP: "198.18.0.12", ICMP: fail(40*time.Second, 5*time.Second, "no reply"), NodeHTTP: fail(30*time.Second, 4*time.Second, "timeout"),
			PodHTTP: fail(20*time.Second, 3*time.Second, "connect: invalid argument")},
		{Name: "n3", NodeIP: "198.18.0.13", ICMP: ok(time.Minute, 0.000087), NodeHTTP: ok(2*time.Minute, 0.001), PodHTTP: ok(time.Minute, 0.0011)},
	}}
	var out bytes.Buffer
	PrintHealth(&out, m, now)
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "every peer probed every 10s") {
		t.Fatalf("output:\n%s", out.String())
	}
	n2, n3 := strings.Fields(lines[2]), strings.Fields(lines[3])
	if n2[0] != "n2" || n2[2] != "failing" || n2[5] != "failing" || n2[7] != "40s" || !strings.Contains(lines[2], "3s ago (pod http): connect: invalid argument") {
		t.Errorf("n2 row: %q; want failing both ways since 40s, last failure 3s ago on pod http", lines[2])
	}
	if n3[0] != "n3" || n3[2] != "ok" || n3[3] != "87µs" || n3[4] != "1ms" || n3[5] != "ok" || n3[7] != "1m0s" || n3[8] != "-" {
		t.Errorf("n3 row: %q; want ok, 87µs, 1ms, ok since 1m0s, no failure", lines[3])
	}
}
