package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// tunnelLoop keeps the tunnel table in step with the Nodes in tunnel mode: the BPF
// maps (PodCIDRs for BPF host routing, the node IPs that take pods' packets through
// the overlay for tunnel-pod-to-node) and the encap routes (for the node's own traffic
// and legacy host routing), and removes any direct node routes left from native routing.
type tunnelLoop struct {
	local    routing.Local
	tunnels  tunnel.Map
	overlay  netlink.Link
	routeMTU int
	nodes    *nodeWatch
	changed  <-chan struct{}
	status   *routeStatus
	loops    *loops
	log      *slog.Logger
	// receivers says which nodes take pods' packets to their IP through the
	// overlay: the node map holds them (tunnel-pod-to-node); nil: none.
	receivers *overlayReceivers
	// stackPodToNode: legacy host routing with tunnel-pod-to-node on: the stack
	// routes pods' packets, so a rule and a table of encap routes take those to the
	// receivers into the overlay (tunnel.SyncPodToNode); off, both are removed.
	stackPodToNode bool
}

func newTunnelLoop(p nodePlan, local routing.Local, tunnels tunnel.Map, overlay netlink.Link, nodes *nodeWatch,
	receivers *overlayReceivers, status *routeStatus, l *loops, log *slog.Logger) *tunnelLoop {
	return &tunnelLoop{local: local, tunnels: tunnels, overlay: overlay, routeMTU: p.RouteMTU, nodes: nodes,
		changed: nodes.subscribe(), receivers: receivers, status: status, loops: l, log: log,
		stackPodToNode: !p.HostRouting.BPF && p.TunnelPodToNode != config.TunnelPodToNodePlain}
}

// Run follows the Nodes until ctx ends (loop "tunnels").
func (t *tunnelLoop) Run(ctx context.Context) {
	t.nodes.follow(ctx, t.changed, "tunnels", t.loops, t.log, t.sync)
}

func (t *tunnelLoop) sync(nodes []*corev1.Node) error {
	t.status.nodesKnown.Store(int32(len(nodes)))
	want, refused := tunnel.DesiredTunnels(t.local, clusterNodes(nodes))
	t.status.set(len(want), refused, t.log)
	var receivers []netip.Addr
	if t.receivers != nil {
		receivers = t.receivers.receivers(want)
	}
	return errors.Join(tunnel.SyncMap(t.tunnels, want, receivers),
		tunnel.SyncPodToNode(t.overlay, t.local.PodCIDR, receivers, t.routeMTU, t.stackPodToNode),
		tunnel.SyncRoutes(t.overlay, want, t.routeMTU, t.local.IP, datapath.OverlayMAC), routing.Kernel{}.SyncNodeRoutes(nil))
}
