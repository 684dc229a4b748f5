package tunnel

import (
	"net"
	"net/netip"
	"testing"
)

func TestDesiredTunnels(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	got := DesiredTunnels("n1", []Node{
		{"n3", a("198.18.0.13"), p("10.244.2.0/24")},
		{"n1", a("198.18.0.11"), p("10.244.0.0/24")},
		{"n2", a("198.18.1.12"), p("10.244.1.0/24")}, // other segment: a tunnel still works
		{"n4", a("198.18.0.14"), netip.Prefix{}},
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
