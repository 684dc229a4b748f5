package agent

import (
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/clusterhealth"
)

// A node takes pods' packets to its IP through the overlay once its health responder
// said so, at the IP it answered from; one that did not say so (another version, no
// myelin) never does; the node map's pinned IPs (the last agent's word) do from the
// start. Each new or moved receiver kicks the Node loops once.
func TestOverlayReceivers(t *testing.T) {
	n2, n3 := netip.MustParseAddr("198.18.0.12"), netip.MustParseAddr("198.18.0.13")
	pinned := netip.MustParseAddr("198.18.0.14")
	kicks := 0
	r := newOverlayReceivers([]netip.Addr{pinned}, func() { kicks++ })
	if !r.receives("node-4", pinned) || r.receives("node-2", n2) {
		t.Fatalf("at start: node-4 (pinned) %v, node-2 (unheard) %v; want true, false", r.receives("node-4", pinned), r.receives("node-2", n2))
	}
	r.heard(clusterhealth.Peer{Name: "node-3", NodeIP: n3}, clusterhealth.Hello{Node: "node-3"})
	if r.receives("node-3", n3) || kicks != 0 {
		t.Errorf("a node that did not say it receives: receives %v, kicks %d; want false, 0", r.receives("node-3", n3), kicks)
	}
	for range 2 {
		r.heard(clusterhealth.Peer{Name: "node-2", NodeIP: n2}, clusterhealth.Hello{Node: "node-2", OverlayToNode: true})
	}
	if !r.receives("node-2", n2) || kicks != 1 {
		t.Errorf("node-2 said it receives, twice: receives %v, kicks %d; want true, 1", r.receives("node-2", n2), kicks)
	}
	moved := netip.MustParseAddr("198.18.0.22")
	r.heard(clusterhealth.Peer{Name: "node-2", NodeIP: moved}, clusterhealth.Hello{Node: "node-2", OverlayToNode: true})
	if !r.receives("node-2", moved) || r.receives("node-2", n2) || kicks != 2 {
		t.Errorf("node-2 moved to %s: receives there %v, at its old IP %v, kicks %d; want true, false, 2",
			moved, r.receives("node-2", moved), r.receives("node-2", n2), kicks)
	}
}
