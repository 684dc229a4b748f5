package agent

import (
	"net/netip"
	"sync"

	"github.com/myelin-net/myelin/internal/clusterhealth"
)

// overlayReceivers are the other nodes that take pods' packets to their IP through the
// overlay (tunnel-pod-to-node): those whose health responder said so (Hello's
// OverlayToNode, learnt by the node-network probe), and those the node map already
// held when this agent started (the last agent's word, so a restart does not send
// plain what receivers with enforce drop until the first probe). A node stays in,
// at the IP it answered from, while its Node does: an agent restarting there keeps
// its datapath, which receives all along. Nodes without myelin (or of a version
// without the receiver, or with cluster-health-port 0) never answer so: pods reach
// them plain.
type overlayReceivers struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	pinned map[netip.Addr]bool
	// learnt is called when a node is learnt or changes its IP (the tunnel loop's
	// kick: Nodes' loops sync again).
	learnt func()
}

func newOverlayReceivers(pinned []netip.Addr, learnt func()) *overlayReceivers {
	r := &overlayReceivers{byName: map[string]netip.Addr{}, pinned: map[netip.Addr]bool{}, learnt: learnt}
	for _, ip := range pinned {
		r.pinned[ip] = true
	}
	return r
}

// heard records a peer's answer to the node-network probe (clusterhealth.Prober's
// OnHello).
func (r *overlayReceivers) heard(peer clusterhealth.Peer, h clusterhealth.Hello) {
	if !h.OverlayToNode {
		return
	}
	r.mu.Lock()
	known := r.byName[peer.Name] == peer.NodeIP
	r.byName[peer.Name] = peer.NodeIP
	r.mu.Unlock()
	if !known && r.learnt != nil {
		r.learnt()
	}
}

// receives says whether node, at ip, takes pods' packets to its IP through the overlay.
func (r *overlayReceivers) receives(node string, ip netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[node] == ip || r.pinned[ip]
}

// overlayReceivers is, in tunnel mode, the set of nodes that take pods' packets to
// their IP through the overlay, seeded from the pinned node map (the last agent's)
// and learnt from the node-network probes, which kick the Node loops when they learn
// one; nil in native routing.
func (s *startup) overlayReceivers(dp interface{ TunnelNodes() ([]netip.Addr, error) }, nodes *nodeWatch) *overlayReceivers {
	if !s.plan.Tunnel {
		return nil
	}
	pinned, err := dp.TunnelNodes()
	if err != nil {
		s.log.Error("read the pinned tunnel nodes: pods reach other nodes' IPs plain until their health probes answer", "err", err)
	}
	return newOverlayReceivers(pinned, nodes.kick)
}
