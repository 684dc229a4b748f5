package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/routing"
)

// peerHealthLoop is node health probing (internal/clusterhealth, docs/health.md): it
// puts the node's health address on lo (clusterhealth.AddressLabel), answers the other
// agents' probes on the node IP and that address at cluster-health-port, and probes
// every other node the Node informer knows but those routing.Peers refuses (a Node
// lying about its PodCIDR or IP would have another node answer for it). Its view answers GET /v1/health and
// the status summary.
type peerHealthLoop struct {
	node     string
	local    routing.Local
	port     int
	nodeIP   netip.Addr
	healthIP netip.Addr
	nodes    *nodeWatch
	known    *nodesDerived[[]clusterhealth.Peer] // healthPeers; the prober's goroutine's
	prober   *clusterhealth.Prober
	loops    *loops
	log      *slog.Logger
	// overlayToNode is what this node answers of its datapath: in tunnel mode it
	// takes pods' packets to its IP through the overlay (overlayReceivers).
	overlayToNode bool
}

// peerHealthLoopName is the loop's name in status.
const peerHealthLoopName = "node-health"

// newPeerHealth returns the loop, or nil with cluster-health-port 0. The peers'
// answers go to receivers (nil: nowhere).
func (s *startup) newPeerHealth(nodes *nodeWatch, receivers *overlayReceivers) *peerHealthLoop {
	if s.conf.ClusterHealthPort == 0 {
		return nil
	}
	h := &peerHealthLoop{node: s.cfg.Node, local: s.local(), port: s.conf.ClusterHealthPort, nodeIP: s.plan.NodeIP,
		healthIP: clusterhealth.HealthAddr(s.podCIDR), nodes: nodes, loops: s.loops, log: s.log, overlayToNode: s.plan.Tunnel}
	h.known = newNodesDerived(nodes, func(ns []*corev1.Node) []clusterhealth.Peer { return healthPeers(h.node, h.local, ns) })
	h.prober = &clusterhealth.Prober{Port: h.port, HealthIP: h.healthIP, Peers: h.peers, Matrix: clusterhealth.NewMatrix()}
	if receivers != nil {
		h.prober.OnHello = receivers.heard
	}
	return h
}

// Run sets up the health address and the responder, then probes until ctx ends. A
// failure to set up is the loop's error in status (probing goes on: what this node
// sees of the others is worth having even when they can't probe it).
func (h *peerHealthLoop) Run(ctx context.Context) {
	srv, err := h.serve()
	h.loops.report(peerHealthLoopName, err)
	if err != nil {
		h.log.Error("node health: other nodes can't probe this one", "err", err)
	} else {
		defer srv.Close()
	}
	if cache.WaitForCacheSync(ctx.Done(), h.nodes.informer.HasSynced) {
		h.prober.Run(ctx)
	}
}

func (h *peerHealthLoop) serve() (*clusterhealth.Server, error) {
	if err := clusterhealth.EnsureAddress(h.healthIP); err != nil {
		return nil, err
	}
	return clusterhealth.Serve(clusterhealth.Hello{Node: h.node, OverlayToNode: h.overlayToNode},
		[]netip.Addr{h.nodeIP, h.healthIP}, h.port, h.log)
}

// peers are the other Nodes with an InternalIP that routing.Peers does not refuse,
// and their health addresses, as of the last Node change (nodesDerived).
func (h *peerHealthLoop) peers() []clusterhealth.Peer {
	ps, err := h.known.get()
	if err != nil {
		h.log.Error("node health: list Nodes", "err", err)
		return nil // computed again next round
	}
	return ps
}

// healthPeers are the Nodes of nodes but node itself, those without an InternalIP
// and those routing.Peers refuses (against local), as the prober probes them.
func healthPeers(node string, local routing.Local, nodes []*corev1.Node) []clusterhealth.Peer {
	_, refused := routing.Peers(local, clusterNodes(nodes))
	liars := map[string]bool{}
	for _, r := range refused {
		liars[r.Node] = true
	}
	out := []clusterhealth.Peer{} // not nil: none is an answer too
	for _, n := range nodes {
		ip := k8s.NodeInternalIP(n)
		if n.Name == node || !ip.IsValid() || liars[n.Name] {
			continue
		}
		cidr, _ := netip.ParsePrefix(n.Spec.PodCIDR)
		out = append(out, clusterhealth.Peer{Name: n.Name, NodeIP: ip, HealthIP: clusterhealth.HealthAddr(cidr)})
	}
	return out
}

func (h *peerHealthLoop) fillStatus(s *api.Status) {
	sum := clusterhealth.Summary(h.prober.Matrix.Peers())
	s.Health = &sum
}

func (h *peerHealthLoop) healthMatrix() api.HealthMatrix {
	return api.HealthMatrix{Node: h.node, Interval: h.prober.Interval().String(), Port: h.port,
		HealthIP: h.healthIP.String(), Peers: h.prober.Matrix.Peers()}
}

// healthSource is a view that also answers GET /v1/health.
type healthSource interface {
	view
	healthMatrix() api.HealthMatrix
}

func (a *server) handleHealthMatrix(w http.ResponseWriter, _ *http.Request) {
	h, ok := findView[healthSource](&a.views)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent on node %s does not probe other nodes yet (starting, or cluster-health-port is 0)", a.cfg.Node))
		return
	}
	writeJSON(w, http.StatusOK, h.healthMatrix())
}
