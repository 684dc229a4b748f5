package routing

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDesiredNodeRoutes(t *testing.T) {
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	nodes := []Node{
		{"n1", a("198.18.0.11"), p("10.244.0.0/24")},
		{"n3", a("198.18.0.13"), p("10.244.2.0/24")},
		{"n2", a("198.18.1.12"), p("10.244.1.0/24")}, // other segment
		{"n4", a("198.18.0.14"), netip.Prefix{}},     // no PodCIDR yet
	}
	routes, skipped := DesiredNodeRoutes("n1", nodes, []netip.Prefix{p("198.18.0.0/24")})
	if len(routes) != 1 || routes[0] != (NodeRoute{"n3", p("10.244.2.0/24"), a("198.18.0.13")}) {
		t.Errorf("routes = %+v, want only n3's", routes)
	}
	if len(skipped) != 1 || skipped[0].Node != "n2" || !strings.Contains(skipped[0].Reason, "not on this node's L2 segment") {
		t.Errorf("skipped = %+v, want n2 with a reason", skipped)
	}
}
