package agent

import (
	"context"
	"errors"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// watchNodes keeps the routes to other nodes' PodCIDRs in step with the Node objects
// (auto-direct-node-routes), re-syncing on every change and every 30 s.
func (a *agent) watchNodes(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(a.cs, 0)
	informer := factory.Core().V1().Nodes()
	changed := make(chan struct{}, 1)
	kick := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, n any) { kick(n) }, DeleteFunc: kick,
	})
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced)
	ticker := time.NewTicker(30 * time.Second)
	defer ticker.Stop()
	for {
		nodes, err := informer.Lister().List(labels.Everything())
		if err == nil {
			err = a.syncNodeRoutes(nodes)
		}
		a.loops.report("node-routes", err)
		if err != nil {
			a.log.Error("sync node routes", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
		}
	}
}

func (a *agent) syncNodeRoutes(nodes []*corev1.Node) error {
	a.nodesKnown.Store(int32(len(nodes)))
	if err := a.syncMasquerade(a.dp, nodes); err != nil {
		return err
	}
	if a.plan.Tunnel {
		return a.syncTunnels(nodes)
	}
	var want []routing.NodeRoute
	var unroutable []string
	if a.plan.AutoDirectNodeRoutes {
		connected, err := routing.ConnectedPrefixes(a.cfg.Uplink)
		if err != nil {
			return err
		}
		var in []routing.Node
		for _, n := range nodes {
			cidr, _ := netip.ParsePrefix(n.Spec.PodCIDR)
			in = append(in, routing.Node{Name: n.Name, IP: k8s.NodeInternalIP(n), PodCIDR: cidr})
		}
		var skipped []routing.Unroutable
		want, skipped = routing.DesiredNodeRoutes(a.cfg.Node, in, connected)
		for _, s := range skipped {
			unroutable = append(unroutable, s.Node+": "+s.Reason)
			a.log.Warn("no direct route to node", "node", s.Node, "reason", s.Reason)
		}
	}
	a.unroutable.Store(&unroutable)
	a.routes.Store(int32(len(want)))
	return routing.Kernel{}.SyncNodeRoutes(want)
}

// watchKubernetes records the apiserver's version and reachability for status.
func (a *agent) watchKubernetes(ctx context.Context) {
	for {
		v, err := a.cs.Discovery().ServerVersion()
		if err == nil {
			s := v.GitVersion
			a.k8sVersion.Store(&s)
		}
		a.loops.report("kubernetes", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(30 * time.Second):
		}
	}
}

// syncTunnels keeps the tunnel table (BPF map for BPF host routing, encap routes for
// the node's own traffic and for legacy host routing) in step with the Nodes, and
// removes any direct node routes left from native routing.
func (a *agent) syncTunnels(nodes []*corev1.Node) error {
	var in []tunnel.Node
	for _, n := range nodes {
		cidr, _ := netip.ParsePrefix(n.Spec.PodCIDR)
		in = append(in, tunnel.Node{Name: n.Name, IP: k8s.NodeInternalIP(n), PodCIDR: cidr})
	}
	want := tunnel.DesiredTunnels(a.cfg.Node, in)
	a.routes.Store(int32(len(want)))
	empty := []string{}
	a.unroutable.Store(&empty)
	var errs []error
	keep := map[netip.Prefix]bool{}
	for _, t := range want {
		keep[t.PodCIDR] = true
		errs = append(errs, a.dp.UpsertTunnel(t.PodCIDR, t.NodeIP))
	}
	have, err := a.dp.Tunnels()
	errs = append(errs, err)
	for cidr := range have {
		if !keep[cidr] {
			errs = append(errs, a.dp.DeleteTunnel(cidr))
		}
	}
	errs = append(errs, tunnel.SyncRoutes(a.overlay, want, a.plan.RouteMTU, datapath.OverlayMAC), routing.Kernel{}.SyncNodeRoutes(nil))
	return errors.Join(errs...)
}
