package agent

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/routing"
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
	var want []routing.NodeRoute
	var unroutable []string
	if a.conf.AutoDirectNodeRoutes {
		connected, err := routing.ConnectedPrefixes(a.cfg.Uplink)
		if err != nil {
			return err
		}
		var in []routing.Node
		for _, n := range nodes {
			cidr, _ := netip.ParsePrefix(n.Spec.PodCIDR)
			in = append(in, routing.Node{Name: n.Name, IP: internalIP(n), PodCIDR: cidr})
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
