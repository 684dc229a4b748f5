package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/link"
	"github.com/myelin-net/myelin/internal/netns"
)

// protoLabPodCIDR marks the routes keepPodCIDRRoutes installs (unassigned RTPROT_*), so
// that a sync only ever touches its own.
const protoLabPodCIDR netlink.RouteProtocol = 203

// keepPodCIDRRoutes keeps the routes of plan.PodCIDRRoutes in the control plane's and
// the router's netns in step with the nodes' pod subnets (nodePodCIDRs) until ctx ends:
// the apiserver reaches pods (pods/proxy, services/proxy, webhooks) in every mode and
// underlay.
func keepPodCIDRRoutes(ctx context.Context, paths labplan.Paths, plan labplan.Plan) error {
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	nodes := factory.Core().V1().Nodes()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	factory.Start(ctx.Done())
	if plan.Options.CNI == labplan.CNIFlannel {
		go pokeEvery(ctx, 2*time.Second, poke) // flanneld's subnet files change without a Node event
	}
	go func() {
		var last [2][]labplan.Route
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			list, _ := nodes.Lister().List(labels.Everything())
			cp, rtr := plan.PodCIDRRoutes(nodePodCIDRs(plan, paths, list))
			if reflect.DeepEqual(last, [2][]labplan.Route{cp, rtr}) {
				continue
			}
			err := errors.Join(syncLabRoutes(labplan.CPNS, cp), syncLabRoutes(labplan.NetNS, rtr))
			if err != nil {
				fmt.Fprintf(os.Stderr, "supervisor: pod CIDR routes: %v\n", err)
				time.AfterFunc(time.Second, func() { poke(nil) }) // try again
				continue
			}
			last = [2][]labplan.Route{cp, rtr}
		}
	}()
	return nil
}

// pokeEvery calls poke every interval until ctx ends.
func pokeEvery(ctx context.Context, interval time.Duration, poke func(any)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			poke(nil)
		}
	}
}

// nodePodCIDRs maps each node's name to the subnet its pods get addresses from: the
// Node's PodCIDR, except with --cni flannel, whose flanneld leases subnets of its own
// (flannel.Leases); routing the PodCIDRs there sent the apiserver's pods/proxy and
// services/proxy to the wrong node or nowhere.
func nodePodCIDRs(plan labplan.Plan, paths labplan.Paths, nodes []*corev1.Node) map[string]netip.Prefix {
	if plan.Options.CNI == labplan.CNIFlannel {
		return flannel.Leases(plan, paths)
	}
	return podCIDRs(nodes)
}

// podCIDRs maps each Node's name to its (first) PodCIDR.
func podCIDRs(nodes []*corev1.Node) map[string]netip.Prefix {
	out := map[string]netip.Prefix{}
	for _, n := range nodes {
		if p, err := netip.ParsePrefix(n.Spec.PodCIDR); err == nil && p.Addr().Is4() {
			out[n.Name] = p
		}
	}
	return out
}

// syncLabRoutes makes the routes marked protoLabPodCIDR in the named lab netns exactly want.
func syncLabRoutes(ns string, want []labplan.Route) error {
	return netns.Do(netns.Path(ns), func() error {
		have, err := link.Dump("lab routes", func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: protoLabPodCIDR}, netlink.RT_FILTER_PROTOCOL)
		})
		if err != nil {
			return fmt.Errorf("list routes in %s: %w", ns, err)
		}
		wanted := map[string]bool{}
		var errs []error
		for _, r := range want {
			wanted[r.Dst.String()] = true
			err := netlink.RouteReplace(&netlink.Route{
				Dst: &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), 32)},
				Gw:  r.Via.AsSlice(), Protocol: protoLabPodCIDR,
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("add route %v via %v in %s: %w", r.Dst, r.Via, ns, err))
			}
		}
		for _, r := range have {
			if r.Dst != nil && !wanted[r.Dst.String()] {
				if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("remove route %v in %s: %w", r.Dst, ns, err))
				}
			}
		}
		return errors.Join(errs...)
	})
}
