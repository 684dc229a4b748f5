package tunnel

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/routing"
)

var (
	p, a = netip.MustParsePrefix, netip.MustParseAddr
	// local is node n1 of a cluster 10.244.0.0/16.
	local = routing.Local{Name: "n1", IP: a("198.18.0.11"), PodCIDR: p("10.244.0.0/24"), ClusterCIDR: p("10.244.0.0/16")}
)

// at is a creation time, in minutes after an epoch.
func at(min int) time.Time {
	return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(min) * time.Minute)
}

func TestDesiredTunnels(t *testing.T) {
	got, refused := DesiredTunnels(local, []Node{
		{Name: "n3", IP: a("198.18.0.13"), PodCIDR: p("10.244.2.0/24")},
		{Name: "n1", IP: a("198.18.0.11"), PodCIDR: p("10.244.0.0/24")},
		{Name: "n2", IP: a("198.18.1.12"), PodCIDR: p("10.244.1.0/24")}, // other segment: a tunnel still works
		{Name: "n4", IP: a("198.18.0.14"), PodCIDR: netip.Prefix{}},
	})
	want := []Tunnel{{"n2", p("10.244.1.0/24"), a("198.18.1.12")}, {"n3", p("10.244.2.0/24"), a("198.18.0.13")}}
	if !slices.Equal(got, want) || len(refused) != 0 {
		t.Errorf("DesiredTunnels = %+v, %+v; want %+v and none refused", got, refused, want)
	}
}

// A Node that lies about its PodCIDR or IP gets no tunnel: the tunnel map also decides
// which outer sources the decapsulating programs accept for a PodCIDR.
// routing.TestDesiredNodeRoutesRefusesLies has every rule; these are one of each.
func TestDesiredTunnelsRefusesLies(t *testing.T) {
	honest := []Node{
		{Name: "n1", IP: a("198.18.0.11"), PodCIDR: p("10.244.0.0/24"), Created: at(0)},
		{Name: "n2", IP: a("198.18.1.12"), PodCIDR: p("10.244.1.0/24"), Created: at(1)},
	}
	n2 := Tunnel{"n2", p("10.244.1.0/24"), a("198.18.1.12")}
	for _, c := range []struct {
		name    string
		liar    Node
		want    []Tunnel
		because string
	}{
		{"more specific prefix inside another's", Node{Name: "x", IP: a("198.18.2.20"), PodCIDR: p("10.244.1.0/25"), Created: at(5)},
			[]Tunnel{n2}, "10.244.1.0/25 of node x overlaps 10.244.1.0/24 of node n2"},
		{"created first keeps the prefix", Node{Name: "x", IP: a("198.18.2.20"), PodCIDR: p("10.244.1.0/24"), Created: at(-1)},
			[]Tunnel{{"x", p("10.244.1.0/24"), a("198.18.2.20")}}, "10.244.1.0/24 of node n2 overlaps 10.244.1.0/24 of node x"},
		{"overlaps this node's PodCIDR", Node{Name: "x", IP: a("198.18.2.20"), PodCIDR: p("10.244.0.0/23"), Created: at(-5)},
			[]Tunnel{n2}, "overlaps this node's (n1) PodCIDR 10.244.0.0/24"},
		{"PodCIDR outside cluster-cidr", Node{Name: "x", IP: a("198.18.2.20"), PodCIDR: p("192.168.0.0/24"), Created: at(5)},
			[]Tunnel{n2}, "not inside cluster-cidr 10.244.0.0/16"},
		{"IP is this node's", Node{Name: "x", IP: a("198.18.0.11"), PodCIDR: p("10.244.5.0/24"), Created: at(5)},
			[]Tunnel{n2}, "this node's (n1) own"},
		{"IP is a pod's", Node{Name: "x", IP: a("10.244.0.9"), PodCIDR: p("10.244.5.0/24"), Created: at(5)},
			[]Tunnel{n2}, "inside this node's (n1) PodCIDR"},
		// Node IPs inside cluster-cidr but outside every PodCIDR are a cluster's choice.
		{"IP in cluster-cidr, in no PodCIDR", Node{Name: "x", IP: a("10.244.200.7"), PodCIDR: p("10.244.5.0/24"), Created: at(5)},
			[]Tunnel{n2, {"x", p("10.244.5.0/24"), a("10.244.200.7")}}, ""},
	} {
		got, refused := DesiredTunnels(local, append(slices.Clone(honest), c.liar))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: tunnels %+v, want %+v", c.name, got, c.want)
		}
		if c.because == "" && len(refused) > 0 {
			t.Errorf("%s: refused %+v, want none", c.name, refused)
		}
		if c.because != "" && (len(refused) != 1 || !strings.Contains(refused[0].Reason, c.because)) {
			t.Errorf("%s: refused %+v, want one saying %q", c.name, refused, c.because)
		}
	}
}

func TestIPEncapRoundTrip(t *testing.T) {
	e := &ipEncap{dst: net.ParseIP("198.18.0.12")}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var d ipEncap
	if err := d.Decode(b); err != nil || !d.Equal(e) {
		t.Errorf("decode(encode) = %v %v, want %v", d.dst, err, e.dst)
	}
}

type fakeMap struct {
	tunnels map[netip.Prefix]netip.Addr
	nodes   map[netip.Addr]bool
}

func (f fakeMap) UpsertTunnel(p netip.Prefix, ip netip.Addr) error { f.tunnels[p] = ip; return nil }
func (f fakeMap) DeleteTunnel(p netip.Prefix) error                { delete(f.tunnels, p); return nil }
func (f fakeMap) Tunnels() (map[netip.Prefix]netip.Addr, error)    { return f.tunnels, nil }
func (f fakeMap) UpsertTunnelNode(ip netip.Addr) error             { f.nodes[ip] = true; return nil }
func (f fakeMap) DeleteTunnelNode(ip netip.Addr) error             { delete(f.nodes, ip); return nil }
func (f fakeMap) TunnelNodes() ([]netip.Addr, error) {
	return slices.Collect(maps.Keys(f.nodes)), nil
}

func TestSyncMap(t *testing.T) {
	m := fakeMap{
		tunnels: map[netip.Prefix]netip.Addr{p("10.244.9.0/24"): a("198.18.0.19"), p("10.244.1.0/24"): a("198.18.0.99")},
		nodes:   map[netip.Addr]bool{a("198.18.0.19"): true, a("198.18.0.99"): true},
	}
	want := []Tunnel{{"n2", p("10.244.1.0/24"), a("198.18.1.12")}, {"n3", p("10.244.2.0/24"), a("198.18.0.13")}}
	if err := SyncMap(m, want, []netip.Addr{a("198.18.1.12"), a("198.18.0.13")}); err != nil {
		t.Fatal(err)
	}
	if len(m.tunnels) != 2 || m.tunnels[p("10.244.1.0/24")] != a("198.18.1.12") || m.tunnels[p("10.244.2.0/24")] != a("198.18.0.13") {
		t.Errorf("after SyncMap: %v, want exactly %+v", m.tunnels, want)
	}
	// The node set is the receivers given: the departed and the moved node's old IP go.
	if len(m.nodes) != 2 || !m.nodes[a("198.18.1.12")] || !m.nodes[a("198.18.0.13")] {
		t.Errorf("after SyncMap: nodes %v, want exactly 198.18.1.12 and 198.18.0.13", m.nodes)
	}
}
