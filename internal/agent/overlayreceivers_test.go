package agent

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// A node takes pods' packets to its IP through the overlay once its health responder
// said so, at the IP it answered from, while its Node has that IP; an answer saying
// otherwise takes it out. The node map's pinned IPs stand for the nodes that have them
// at the first sync, and are dropped otherwise. A Node deleted, or moved to another
// IP, must answer again (a machine reusing its IP is not taken for it). Each change
// by an answer kicks the Node loops once; the seed's nodes answering again do not.
func TestOverlayReceivers(t *testing.T) {
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	nodes := func(ns ...string) []tunnel.Tunnel {
		var out []tunnel.Tunnel
		for i := 0; i < len(ns); i += 2 {
			out = append(out, tunnel.Tunnel{Node: ns[i], NodeIP: ip(ns[i+1])})
		}
		return out
	}
	kicks := 0
	r := newOverlayReceivers([]netip.Addr{ip("198.18.0.14"), ip("198.18.0.99")}, func() { kicks++ })
	hello := func(name, addr string, says bool) {
		r.heard(clusterhealth.Peer{Name: name, NodeIP: ip(addr)}, clusterhealth.Hello{Node: name, OverlayToNode: says})
	}
	step := func(what string, want []tunnel.Tunnel, receivers string, wantKicks int) {
		t.Helper()
		if got := fmt.Sprint(r.receivers(want)); got != receivers || kicks != wantKicks {
			t.Errorf("%s: receivers %s, kicks %d; want %s, %d", what, got, kicks, receivers, wantKicks)
		}
	}
	all := nodes("n2", "198.18.0.12", "n3", "198.18.0.13", "n4", "198.18.0.14")
	step("at start: the seed's node, not the seed's IP no node has", all, "[198.18.0.14]", 0)
	hello("n4", "198.18.0.14", true)
	step("the seed's node answers: no kick", all, "[198.18.0.14]", 0)
	hello("n3", "198.18.0.13", false)
	step("a node that does not receive", all, "[198.18.0.14]", 0)
	hello("n2", "198.18.0.12", true)
	hello("n2", "198.18.0.12", true)
	step("node-2 answered twice", all, "[198.18.0.12 198.18.0.14]", 1)
	hello("n2", "198.18.0.12", false)
	step("node-2 rolled back", all, "[198.18.0.14]", 2)
	hello("n2", "198.18.0.12", true)
	step("node-2 again", all, "[198.18.0.12 198.18.0.14]", 3)
	step("node-2's Node deleted", nodes("n3", "198.18.0.13", "n4", "198.18.0.14"), "[198.18.0.14]", 3)
	step("node-2's Node back: it must answer again", all, "[198.18.0.14]", 3)
	step("node-4 at another IP: it must answer again", nodes("n4", "198.18.0.24"), "[]", 3)
	step("another machine at node-4's old IP", nodes("n5", "198.18.0.14"), "[]", 3)
}
