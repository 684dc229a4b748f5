package clusterhealth

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// A path goes unknown → ok → failing → ok; Since moves only on a change, the last
// failure stays visible after recovery, latency is that of the last success.
func TestPathStateMachine(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p := api.PathHealth{State: api.PathUnknown, Since: t0}
	p = record(p, Result{At: at(1), Latency: 3 * time.Millisecond})
	p = record(p, Result{At: at(11), Latency: 2 * time.Millisecond})
	if p.State != api.PathOK || !p.Since.Equal(at(1)) || p.LatencySeconds != 0.002 || !p.LastProbe.Equal(at(11)) || !p.LastFailure.IsZero() {
		t.Errorf("after two successes: %+v; want ok since 1s, latency 2ms, no failure", p)
	}
	boom := errors.New("no ICMP echo reply")
	p = record(p, Result{At: at(21), Err: boom})
	p = record(p, Result{At: at(31), Err: boom})
	if p.State != api.PathFailing || !p.Since.Equal(at(21)) || !p.LastFailure.Equal(at(31)) || p.LastError != boom.Error() || p.LatencySeconds != 0 {
		t.Errorf("after two failures: %+v; want failing since 21s, last failure 31s", p)
	}
	p = record(p, Result{At: at(41), Latency: time.Millisecond})
	if p.State != api.PathOK || !p.Since.Equal(at(41)) || !p.LastFailure.Equal(at(31)) || p.LastError == "" {
		t.Errorf("after recovery: %+v; want ok since 41s with the failure of 31s kept", p)
	}
}

// The matrix follows the peer list: new peers start unknown, changed addresses reset,
// removed peers go (and their late results are ignored); the summary names failures.
func TestMatrix(t *testing.T) {
	t0 := time.Now()
	a := Peer{Name: "n2", NodeIP: netip.MustParseAddr("198.18.0.12"), HealthIP: HealthAddr(netip.MustParsePrefix("10.244.1.0/24"))}
	b := Peer{Name: "n3", NodeIP: netip.MustParseAddr("198.18.0.13")}
	if a.HealthIP.String() != "10.244.1.1" {
		t.Fatalf("HealthAddr = %v, want the PodCIDR's first address 10.244.1.1", a.HealthIP)
	}
	m := NewMatrix()
	m.SetPeers([]Peer{b, a}, t0)
	ps := m.Peers()
	if len(ps) != 2 || ps[0].Name != "n2" || ps[0].HealthIP != "10.244.1.1" || ps[1].HealthIP != "" || ps[0].ViaNode() != api.PathUnknown || ps[0].Reachable() {
		t.Fatalf("new peers = %+v; want n2, n3 sorted, unknown", ps)
	}
	for _, path := range []pathKind{pathICMP, pathNodeHTTP, pathPodHTTP} {
		m.Record("n2", path, Result{At: t0, Latency: time.Millisecond})
	}
	m.Record("n3", pathICMP, Result{At: t0, Latency: time.Millisecond})
	m.Record("n3", pathNodeHTTP, Result{At: t0, Err: errors.New("refused")})
	m.Record("n3", pathPodHTTP, Result{At: t0, Err: errNoHealthIP})
	want := api.HealthSummary{Peers: 2, Reachable: 1, Failing: []string{"n3 (node and pod network)"}}
	if got := Summary(m.Peers()); !reflect.DeepEqual(got, want) {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
	if s := Samples(m.Peers()); len(s) != 10 { // n2: 3 status + 3 latency; n3: 3 status, one latency
		t.Errorf("samples = %d (%+v), want 10", len(s), s)
	}
	m.SetPeers([]Peer{a}, t0.Add(time.Second)) // n3 removed, n2 kept
	m.Record("n3", pathICMP, Result{At: t0})
	if ps := m.Peers(); len(ps) != 1 || !ps[0].Reachable() {
		t.Errorf("after n3's removal: %+v; want only n2, still reachable", ps)
	}
	a.NodeIP = netip.MustParseAddr("198.18.0.22")
	m.SetPeers([]Peer{a}, t0.Add(2*time.Second))
	if ps := m.Peers(); ps[0].ICMP.State != api.PathUnknown || ps[0].NodeIP != "198.18.0.22" {
		t.Errorf("after n2's address changed: %+v; want unknown at the new address", ps[0])
	}
}
