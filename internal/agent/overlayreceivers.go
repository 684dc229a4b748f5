package agent

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// overlayReceivers are the other nodes that take pods' packets to their IP through the
// overlay (tunnel-pod-to-node): those whose health responder said so (Hello's
// OverlayToNode, learnt by the node-network probe), each at the IP it answered from,
// while its Node has that IP (an agent restarting there keeps its datapath, which
// receives all along); an answer that says otherwise (a rollback, native routing)
// takes a node out. At start the node map's IPs (the last agent's word) stand for the
// nodes that have them at the first sync, so a restart does not send plain what
// receivers with enforce drop until the first probe; IPs no node has then are
// dropped. A Node deleted, or at another IP, must answer again: a machine that took
// a departed node's IP is not taken for it. Nodes without myelin (or of a version
// without the receiver, or with cluster-health-port 0) never answer so: pods reach
// them plain.
type overlayReceivers struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	// seed: the node map's IPs at start, until the first receivers call ties them
	// to the nodes that have them.
	seed map[netip.Addr]bool
	// learnt is called when the set changes by an answer (the Node loops' kick:
	// the tunnel loop writes the node map again).
	learnt func()
}

func newOverlayReceivers(pinned []netip.Addr, learnt func()) *overlayReceivers {
	r := &overlayReceivers{byName: map[string]netip.Addr{}, seed: map[netip.Addr]bool{}, learnt: learnt}
	for _, ip := range pinned {
		r.seed[ip] = true
	}
	return r
}

// heard records a peer's answer to the node-network probe (clusterhealth.Prober's
// OnHello).
func (r *overlayReceivers) heard(peer clusterhealth.Peer, h clusterhealth.Hello) {
	r.mu.Lock()
	ip, had := r.byName[peer.Name]
	changed := false
	switch {
	case h.OverlayToNode && (!had || ip != peer.NodeIP):
		r.byName[peer.Name], changed = peer.NodeIP, true
	case !h.OverlayToNode && had:
		delete(r.byName, peer.Name)
		changed = true
	}
	r.mu.Unlock()
	if changed && r.learnt != nil {
		r.learnt()
	}
}

// receivers returns the IPs of the nodes of want that receive, and forgets the
// nodes that are not in want at the IP they answered from. The first call ties the
// seed to want's nodes.
func (r *overlayReceivers) receivers(want []tunnel.Tunnel) []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := make(map[string]netip.Addr, len(want))
	for _, t := range want {
		current[t.Node] = t.NodeIP
		if _, ok := r.byName[t.Node]; !ok && r.seed[t.NodeIP] {
			r.byName[t.Node] = t.NodeIP
		}
	}
	r.seed = nil
	var out []netip.Addr
	for name, ip := range r.byName {
		if current[name] != ip {
			delete(r.byName, name)
			continue
		}
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
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
