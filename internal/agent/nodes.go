package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/routing"
)

// nodeResync is how often the loops that follow Nodes re-sync without a change.
const nodeResync = 30 * time.Second

// nodeWatch is the agent's one informer on Node objects. Each loop that follows Nodes
// (masquerade, node routes, tunnels) subscribes before it runs and is kicked on every
// change; Run starts the informer.
type nodeWatch struct {
	informer cache.SharedIndexInformer
	lister   corelisters.NodeLister
	mu       sync.Mutex
	subs     []chan struct{}
}

func newNodeWatch(cs kube.Client) *nodeWatch {
	w := &nodeWatch{informer: kube.NewInformer(cs, kube.Nodes, slimNode)}
	w.lister = corelisters.NewNodeLister(w.informer.GetIndexer())
	kick := func(any) { w.kick() }
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, DeleteFunc: kick,
		UpdateFunc: func(o, n any) {
			if nodeUpdateMatters(o, n) { // nodekick.go
				kick(n)
			}
		},
	})
	return w
}

// Run runs the informer until ctx ends.
func (w *nodeWatch) Run(ctx context.Context) { w.informer.Run(ctx.Done()) }

// subscribe returns a channel that receives (coalesced) a value on every change.
func (w *nodeWatch) subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch
}

func (w *nodeWatch) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// follow runs sync with every Node once the informer has synced, then again on every
// change (changed, from subscribe) and every nodeResync, reporting each run as the
// loop name, until ctx ends. An agent stopped before the informer synced never runs
// sync: with the cache still empty it would delete every other node's route, tunnel
// and no-masquerade entry on its way out.
func (w *nodeWatch) follow(ctx context.Context, changed <-chan struct{}, name string, l *loops, log *slog.Logger,
	sync func([]*corev1.Node) error) {
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		return
	}
	ticker := time.NewTicker(nodeResync)
	defer ticker.Stop()
	for {
		nodes, err := w.lister.List(labels.Everything())
		if err == nil {
			err = sync(nodes)
		}
		l.report(name, err)
		if err != nil {
			log.Error("sync with the Nodes", "loop", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
		}
	}
}

// clusterNodes is what route and tunnel planning need of each Node. The creation
// time is in UTC, without a monotonic reading, so that two conversions of one Node
// compare equal (nodeUpdateMatters).
func clusterNodes(nodes []*corev1.Node) []routing.Node {
	out := make([]routing.Node, 0, len(nodes))
	for _, n := range nodes {
		cidr, _ := netip.ParsePrefix(n.Spec.PodCIDR)
		out = append(out, routing.Node{Name: n.Name, IP: k8s.NodeInternalIP(n), PodCIDR: cidr.Masked(),
			Created: n.CreationTimestamp.UTC()})
	}
	return out
}

// routeStatus is what the node-routes or tunnel loop last did, for status.
type routeStatus struct {
	nodesKnown atomic.Int32
	routes     atomic.Int32
	unroutable atomic.Pointer[[]string]
}

// set records a sync's routes (or tunnels) and the nodes without one, and logs each
// such node (or new reason) once, not on every resync: with many Nodes refused, a
// log of the whole list on each change would grow with the square of the Nodes.
func (r *routeStatus) set(routes int, skipped []routing.Unroutable, log *slog.Logger) {
	logged := map[string]bool{}
	if last := r.unroutable.Load(); last != nil {
		for _, line := range *last {
			logged[line] = true
		}
	}
	unroutable := make([]string, 0, len(skipped))
	for _, s := range skipped {
		line := s.Node + ": " + s.Reason
		unroutable = append(unroutable, line)
		if !logged[line] {
			log.Warn("no route to node", "node", s.Node, "reason", s.Reason)
		}
	}
	r.unroutable.Store(&unroutable)
	r.routes.Store(int32(routes))
}

// nodesDerived is what one loop derives from the Node cache (compute), computed
// again only after a Node that matters changed: routing.Peers compares every Node
// with every other's range (~10 ms at 5,000 Nodes), too much for every probe round or
// policy computation. The kick is taken before the list, so a change during the
// computation is seen the next time. Only its loop's goroutine uses it.
type nodesDerived[T any] struct {
	nodes   *nodeWatch
	changed <-chan struct{}
	compute func([]*corev1.Node) T
	known   T
	valid   bool
}

func newNodesDerived[T any](nodes *nodeWatch, compute func([]*corev1.Node) T) *nodesDerived[T] {
	return &nodesDerived[T]{nodes: nodes, changed: nodes.subscribe(), compute: compute}
}

// get returns the value as of the last change, or the list's error (then computed
// again at the next call).
func (d *nodesDerived[T]) get() (T, error) {
	select {
	case <-d.changed:
	default:
		if d.valid {
			return d.known, nil
		}
	}
	nodes, err := d.nodes.lister.List(labels.Everything())
	if err != nil {
		var zero T
		d.known, d.valid = zero, false
		return zero, err
	}
	d.known, d.valid = d.compute(nodes), true
	return d.known, nil
}
