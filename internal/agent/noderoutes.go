package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// nodeRoutesLoop keeps the routes to other nodes' PodCIDRs in step with the Node
// objects in native routing (auto-direct-node-routes; none when it is off).
type nodeRoutesLoop struct {
	local   routing.Local
	uplink  string
	auto    bool // auto-direct-node-routes
	nodes   *nodeWatch
	changed <-chan struct{}
	status  *routeStatus
	loops   *loops
	log     *slog.Logger
}

func newNodeRoutesLoop(p nodePlan, local routing.Local, uplink string, nodes *nodeWatch, status *routeStatus, l *loops,
	log *slog.Logger) *nodeRoutesLoop {
	return &nodeRoutesLoop{local: local, uplink: uplink, auto: p.AutoDirectNodeRoutes, nodes: nodes,
		changed: nodes.subscribe(), status: status, loops: l, log: log}
}

// Run follows the Nodes until ctx ends (loop "node-routes").
func (r *nodeRoutesLoop) Run(ctx context.Context) {
	r.nodes.follow(ctx, r.changed, "node-routes", r.loops, r.log, r.sync)
}

func (r *nodeRoutesLoop) sync(nodes []*corev1.Node) error {
	r.status.nodesKnown.Store(int32(len(nodes)))
	var want []routing.NodeRoute
	var skipped []routing.Unroutable
	if r.auto {
		connected, err := routing.ConnectedPrefixes(r.uplink)
		if err != nil {
			return err
		}
		want, skipped = routing.DesiredNodeRoutes(r.local, clusterNodes(nodes), connected)
	}
	r.status.set(len(want), skipped, r.log)
	// No overlay in native routing: a pod-to-node rule left from tunnel mode goes.
	return errors.Join(routing.Kernel{}.SyncNodeRoutes(want), tunnel.SyncPodToNode(nil, netip.Prefix{}, nil, 0, false))
}
