package tunnel

import (
	"net"
	"net/netip"
	"testing"
)

func TestDesiredTunnels(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	got := DesiredTunnels("n1", []Node{
		{Name: "n3", IP: a("198.18.0.13"), PodCIDR: p("10.244.2.0/24")},
		{Name: "n1", IP: a("198.18.0.11"), PodCIDR: p("10.244.0.0/24")},
		{Name: "n2", IP: a("198.18.1.12"), PodCIDR: p("10.244.1.0/24")}, // other segment: a tunnel still works
		{Name: "n4", IP: a("198.18.0.14"), PodCIDR: netip.Prefix{}},
	})
	want := []Tunnel{{"n2", p("10.244.1.0/24"), a("198.18.1.12")}, {"n3", p("10.244.2.0/24"), a("198.18.0.13")}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("DesiredTunnels = %+v, want %+v", got, want)
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

type fakeMap map[netip.Prefix]netip.Addr

func (f fakeMap) UpsertTunnel(p netip.Prefix, ip netip.Addr) error { f[p] = ip; return nil }
func (f fakeMap) DeleteTunnel(p netip.Prefix) error                { delete(f, p); return nil }
func (f fakeMap) Tunnels() (map[netip.Prefix]netip.Addr, error)    { return f, nil }

func TestSyncMap(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	m := fakeMap{p("10.244.9.0/24"): a("198.18.0.19"), p("10.244.1.0/24"): a("198.18.0.99")}
	want := []Tunnel{{"n2", p("10.244.1.0/24"), a("198.18.1.12")}, {"n3", p("10.244.2.0/24"), a("198.18.0.13")}}
	if err := SyncMap(m, want); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[p("10.244.1.0/24")] != a("198.18.1.12") || m[p("10.244.2.0/24")] != a("198.18.0.13") {
		t.Errorf("after SyncMap: %v, want exactly %+v", m, want)
	}
}
