package routing

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkPeers checks 5,000 Nodes created in an order unrelated to their PodCIDRs
// (the worst case of the sorted claims): a scan per Node took 130 ms a sync.
func BenchmarkPeers(b *testing.B) {
	const n = 5000
	nodes := make([]Node, 0, n)
	for i := range n {
		nodes = append(nodes, Node{Name: fmt.Sprintf("node-%04d", i), IP: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}),
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24), Created: at(i * 7919 % n)})
	}
	local := Local{Name: "self", IP: a("198.19.0.1"), PodCIDR: p("10.200.0.0/24"), ClusterCIDR: p("10.0.0.0/8")}
	for b.Loop() {
		if ok, _ := Peers(local, nodes); len(ok) != n {
			b.Fatalf("%d peers, want %d", len(ok), n)
		}
	}
}
