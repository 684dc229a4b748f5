package routing

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	p, a = netip.MustParsePrefix, netip.MustParseAddr
	// testLocal is node n1 of a cluster 10.244.0.0/16 whose nodes are on 198.18.0.0/24.
	testLocal = Local{Name: "n1", IP: a("198.18.0.11"), PodCIDR: p("10.244.0.0/24"), ClusterCIDR: p("10.244.0.0/16")}
	epoch     = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
)

// at is a creation time, in minutes after epoch.
func at(min int) time.Time { return epoch.Add(time.Duration(min) * time.Minute) }

// honest are the cluster's nodes as the controller-manager and kubelets made them.
var honest = []Node{
	{"n1", a("198.18.0.11"), p("10.244.0.0/24"), at(0)},
	{"n2", a("198.18.0.12"), p("10.244.1.0/24"), at(1)},
	{"n3", a("198.18.0.13"), p("10.244.2.0/24"), at(2)},
}

// lyingNodes are Nodes whose PodCIDR or IP lies, added to honest: which nodes get a
// route, and each refused node with what its reason must say. DesiredNodeRoutes and
// DesiredTunnels are both checked against them.
var lyingNodes = []struct {
	name    string
	add     []Node
	routed  []string
	refused map[string][]string
}{
	{"equal PodCIDR, created later", []Node{{"x", a("198.18.0.20"), p("10.244.1.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"10.244.1.0/24 of node x overlaps 10.244.1.0/24 of node n2", "created first"}}},
	{"more specific prefix inside another's", []Node{{"x", a("198.18.0.20"), p("10.244.1.128/25"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"10.244.1.128/25 of node x overlaps 10.244.1.0/24 of node n2"}}},
	{"prefix containing another's", []Node{{"x", a("198.18.0.20"), p("10.244.2.0/23"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"10.244.2.0/23 of node x overlaps 10.244.2.0/24 of node n3"}}},
	{"prefix holding another's past its first address; neighbours untouched", []Node{
		{"n4", a("198.18.0.14"), p("10.244.7.0/24"), at(3)}, {"x", a("198.18.0.20"), p("10.244.4.0/22"), at(5)},
		{"y", a("198.18.0.21"), p("10.244.8.0/24"), at(6)}, {"z", a("198.18.0.22"), p("10.244.3.0/24"), at(7)}},
		[]string{"n2", "n3", "n4", "y", "z"}, map[string][]string{"x": {"10.244.4.0/22 of node x overlaps 10.244.7.0/24 of node n4"}}},
	{"created first keeps the prefix", []Node{{"x", a("198.18.0.20"), p("10.244.1.0/24"), at(-1)}},
		[]string{"n3", "x"}, map[string][]string{"n2": {"10.244.1.0/24 of node n2 overlaps 10.244.1.0/24 of node x"}}},
	{"same creation time: the lower name keeps it", []Node{
		{"y", a("198.18.0.21"), p("10.244.5.0/24"), at(5)}, {"x", a("198.18.0.20"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3", "x"}, map[string][]string{"y": {"of node y overlaps 10.244.5.0/24 of node x"}}},
	{"inside this node's PodCIDR", []Node{{"x", a("198.18.0.20"), p("10.244.0.128/25"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"10.244.0.128/25 overlaps this node's (n1) PodCIDR 10.244.0.0/24"}}},
	{"this node's PodCIDR, created before it", []Node{{"x", a("198.18.0.20"), p("10.244.0.0/24"), at(-5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"overlaps this node's (n1) PodCIDR"}}},
	{"the whole cluster-cidr", []Node{{"x", a("198.18.0.20"), p("10.244.0.0/16"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"overlaps this node's (n1) PodCIDR"}}},
	{"PodCIDR outside cluster-cidr", []Node{{"x", a("198.18.0.20"), p("10.99.0.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"PodCIDR 10.99.0.0/24 is not inside cluster-cidr 10.244.0.0/16"}}},
	{"PodCIDR larger than cluster-cidr", []Node{{"x", a("198.18.0.20"), p("10.0.0.0/8"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"not inside cluster-cidr"}}},
	{"IP is this node's", []Node{{"x", a("198.18.0.11"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"node IP 198.18.0.11 is this node's (n1) own"}}},
	{"IP is another node's pod's", []Node{{"x", a("10.244.1.7"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"node IP 10.244.1.7 is inside node n2's PodCIDR 10.244.1.0/24"}}},
	{"IP is a pod's of a node created later", []Node{{"x", a("10.244.7.7"), p("10.244.5.0/24"), at(5)}, {"y", a("198.18.0.21"), p("10.244.7.0/24"), at(6)}},
		[]string{"n2", "n3", "y"}, map[string][]string{"x": {"inside node y's PodCIDR 10.244.7.0/24"}}},
	{"IP is this node's pod's", []Node{{"x", a("10.244.0.7"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"node IP 10.244.0.7 is inside this node's (n1) PodCIDR"}}},
	{"IP inside its own PodCIDR", []Node{{"x", a("10.244.5.1"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"inside node x's PodCIDR"}}},
	{"IP is loopback", []Node{{"x", a("127.0.0.1"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"x": {"node IP 127.0.0.1 is not a unicast IPv4 address"}}},
	{"IP shared with another node: both routed", []Node{{"x", a("198.18.0.12"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3", "x"}, nil},
	{"a refused node keeps its PodCIDR from later ones", []Node{
		{"o", a("127.0.0.1"), p("10.244.5.0/24"), at(3)}, {"x", a("198.18.0.20"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3"}, map[string][]string{"o": {"not a unicast"}, "x": {"of node x overlaps 10.244.5.0/24 of node o"}}},
	{"a node without a PodCIDR yet is neither routed nor reported", []Node{
		{"o", a("198.18.0.30"), netip.Prefix{}, at(3)}, {"x", a("198.18.0.30"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3", "x"}, nil},
	{"an outside PodCIDR claims nothing", []Node{
		{"o", a("198.18.0.30"), p("10.0.0.0/8"), at(3)}, {"x", a("198.18.0.20"), p("10.244.5.0/24"), at(5)}},
		[]string{"n2", "n3", "x"}, map[string][]string{"o": {"not inside cluster-cidr"}}},
}

// checkPlan compares what a planner routed and refused with a lyingNodes row.
func checkPlan(t *testing.T, name string, routed []string, refused []Unroutable, wantRouted []string, wantRefused map[string][]string) {
	t.Helper()
	slices.Sort(routed)
	if !slices.Equal(routed, wantRouted) {
		t.Errorf("%s: routed to %v, want %v", name, routed, wantRouted)
	}
	if len(refused) != len(wantRefused) {
		t.Errorf("%s: refused %+v, want %d nodes", name, refused, len(wantRefused))
	}
	for _, r := range refused {
		for _, s := range wantRefused[r.Node] {
			if !strings.Contains(r.Reason, s) {
				t.Errorf("%s: node %s refused with %q, want it to say %q", name, r.Node, r.Reason, s)
			}
		}
		if wantRefused[r.Node] == nil {
			t.Errorf("%s: node %s refused (%s)", name, r.Node, r.Reason)
		}
	}
}

func TestDesiredNodeRoutesRefusesLies(t *testing.T) {
	for _, c := range lyingNodes {
		routes, skipped := DesiredNodeRoutes(testLocal, append(slices.Clone(honest), c.add...), []netip.Prefix{p("198.18.0.0/24")})
		var routed []string
		for _, r := range routes {
			routed = append(routed, r.Node)
		}
		checkPlan(t, c.name, routed, skipped, c.routed, c.refused)
	}
}

func TestDesiredNodeRoutes(t *testing.T) {
	nodes := []Node{
		{"n1", a("198.18.0.11"), p("10.244.0.0/24"), at(0)},
		{"n3", a("198.18.0.13"), p("10.244.2.0/24"), at(2)},
		{"n2", a("198.18.1.12"), p("10.244.1.0/24"), at(1)}, // other segment
		{"n4", a("198.18.0.14"), netip.Prefix{}, at(3)},     // no PodCIDR yet
	}
	routes, skipped := DesiredNodeRoutes(testLocal, nodes, []netip.Prefix{p("198.18.0.0/24")})
	if len(routes) != 1 || routes[0] != (NodeRoute{"n3", p("10.244.2.0/24"), a("198.18.0.13")}) {
		t.Errorf("routes = %+v, want only n3's", routes)
	}
	if len(skipped) != 1 || skipped[0].Node != "n2" || !strings.Contains(skipped[0].Reason, "not on this node's L2 segment") {
		t.Errorf("skipped = %+v, want n2 with a reason", skipped)
	}
}
