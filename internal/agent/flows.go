package agent

import (
	"context"
	"encoding/binary"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
	"github.com/myelin-net/myelin/internal/hubble"
	"github.com/myelin-net/myelin/internal/policy"
)

// flowLoop feeds the node's flow store (nodeDatapath.flows) from the datapath's
// flow ring buffer while enable-hubble is on, resolving addresses to pods (local
// endpoints, then the policy loop's pods of the whole cluster) and Service
// frontends. Loop "flows".
type flowLoop struct {
	store   *flowstore.Store
	dp      *datapath.Datapath
	enabled bool
	origin  flowstore.Origin
	eps     *endpoint.Manager
	loops   *loops
	log     *slog.Logger

	pol      atomic.Pointer[policyLoop]
	services atomic.Pointer[serviceLoop]
	pods     podIndex     // used only by the feeding goroutine
	verdicts verdictCache // used only by the feeding goroutine
}

// podIndex is the policy loop's pods by address, rebuilt when its view changes: one
// map lookup per address instead of a walk over every pod of the cluster.
type podIndex struct {
	view *policyView
	byIP map[uint32]*policy.Pod // IPv4 as a number: hashes faster than a netip.Addr
	// capped holds the flow labels (flowLabels) of the view's pods with more than
	// flowLabelsMax labels, made once per view.
	capped map[*policy.Pod]map[string]string
	// endpoints are the flow Endpoints of the view's pods flows named, made once per
	// view and shared by their flows (flowstore.Resolver).
	endpoints map[uint32]*flow.Endpoint
}

// flowLabelsMax bounds the labels a flow carries of each pod: Kubernetes bounds a
// label's size (a 316-byte key, a 63-byte value) but not their number, and a pod with
// thousands of labels would make each of its flows megabytes long, more than a
// follower's JSON line (1 MiB) and what the relay may hold, so one tenant's pod could
// break its node's flow streams. A pod with more keeps its first flowLabelsMax labels
// by key in flows (policy selectors see them all).
const flowLabelsMax = hubble.FlowLabelsMax

// flowLabels are pod p's labels as flows carry them: all of them, or the first
// flowLabelsMax by key (made once per view, shared by its flows).
func (x *podIndex) flowLabels(p *policy.Pod) map[string]string {
	if len(p.Labels) <= flowLabelsMax {
		return p.Labels
	}
	if m, ok := x.capped[p]; ok {
		return m
	}
	keys := slices.Sorted(maps.Keys(p.Labels))[:flowLabelsMax]
	m := make(map[string]string, flowLabelsMax)
	for _, k := range keys {
		m[k] = p.Labels[k]
	}
	if x.capped == nil {
		x.capped = map[*policy.Pod]map[string]string{}
	}
	x.capped[p] = m
	return m
}

// in looks ip up among the pods of view v.
func (x *podIndex) in(v *policyView, ip netip.Addr) (*policy.Pod, bool) {
	if v != x.view {
		x.view, x.byIP, x.capped, x.endpoints = v, make(map[uint32]*policy.Pod, len(v.input.Pods)), nil, nil
		for i := range v.input.Pods {
			if ip := v.input.Pods[i].IP; ip.Is4() {
				x.byIP[ipv4Key(ip)] = &v.input.Pods[i]
			}
		}
	}
	if !ip.Is4() {
		return nil, false
	}
	p, ok := x.byIP[ipv4Key(ip)]
	return p, ok
}

// ipv4Key is an IPv4 address as a map key.
func ipv4Key(ip netip.Addr) uint32 {
	a := ip.As4()
	return binary.BigEndian.Uint32(a[:])
}

// startFlows creates the node's flow store (always: empty while flows are off, so
// its readers need no nil checks) and the loop that feeds it.
func (s *startup) startFlows(node *nodeDatapath) *flowLoop {
	node.flows = flowstore.New(s.conf.HubbleEventBufferCapacity)
	mode := "legacy"
	if s.plan.HostRouting.BPF {
		mode = "bpf"
	}
	return &flowLoop{store: node.flows, dp: node.dp, enabled: s.conf.EnableHubble,
		origin: flowstore.Origin{Node: s.cfg.Node, HostRouting: mode}, eps: node.eps, loops: s.loops,
		log: s.log.With("loop", "flows")}
}

// resolveWith lets the loop name pods of other nodes and Services once those loops run.
func (l *flowLoop) resolveWith(pol *policyLoop, svc *serviceLoop) {
	l.pol.Store(pol)
	if svc != nil {
		l.services.Store(svc)
	}
}

// Run switches flows on in the datapath and feeds the store until ctx ends, then
// switches them off: with nobody reading, records would only fill the ring.
func (l *flowLoop) Run(ctx context.Context) {
	if err := l.dp.SetFlows(l.enabled); err != nil || !l.enabled {
		l.loops.report("flows", err)
		return
	}
	r, err := l.dp.NewFlowReader()
	if err != nil {
		l.loops.report("flows", err)
		_ = l.dp.SetFlows(false)
		return
	}
	l.loops.report("flows", nil)
	go l.reportKernelLost(ctx)
	if err := lowerFlowReaderPriority(); err != nil { // this goroutine feeds the store
		l.log.Warn("flow reader runs at normal priority", "err", err)
	}
	l.store.Feed(ctx, r, l.origin, l, l.log)
	if err := l.dp.SetFlows(false); err != nil {
		l.log.Error("switch flows off", "err", err)
	}
}

// reportKernelLost adds a LOST flow every second in which the datapath's flow ring
// had no room for records (FLOWS_LOST) or a pod's DNS or drop records were past
// their budget (FLOWS_LIMITED, bpf/lib/flows.h), so followers learn of them too.
func (l *flowLoop) reportKernelLost(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := l.kernelLost()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := l.kernelLost()
		if n > last {
			l.store.Add(&flow.Flow{Time: time.Now(), Node: l.origin.Node, Type: flow.TypeLost, Lost: n - last})
		}
		last = n
	}
}

// kernelLost is the datapath's count of flow records it could not write.
func (l *flowLoop) kernelLost() uint64 {
	metrics, err := l.dp.Metrics()
	if err != nil {
		return 0
	}
	var n uint64
	for _, m := range metrics {
		if m.Reason == "FLOWS_LOST" || m.Reason == "FLOWS_LIMITED" {
			n += m.Packets
		}
	}
	return n
}

// Endpoint implements flowstore.Resolver: the cluster's pod with ip.
func (l *flowLoop) Endpoint(ip netip.Addr) *flow.Endpoint {
	if pol := l.pol.Load(); pol != nil {
		if ep := l.pods.endpoint(pol, ip); ep != nil {
			return ep
		}
	}
	if name := l.eps.PodByIP(ip); name != "" { // a local pod the policy loop has not seen yet
		ns, pod, _ := strings.Cut(name, "/")
		return &flow.Endpoint{IP: ip.String(), Namespace: ns, Pod: pod, Node: l.origin.Node}
	}
	return nil
}

// endpoint is the flow Endpoint of the pod with ip in pol's view, nil if none: made
// the first time a flow names it in this view, then shared.
func (x *podIndex) endpoint(pol *policyLoop, ip netip.Addr) *flow.Endpoint {
	v := pol.view.Load()
	if v == nil || !ip.Is4() {
		return nil
	}
	if v == x.view {
		if ep, ok := x.endpoints[ipv4Key(ip)]; ok {
			return ep
		}
	}
	p, ok := x.in(v, ip)
	if !ok {
		return nil
	}
	ep := &flow.Endpoint{IP: ip.String(), Namespace: p.Namespace, Pod: p.Name, Labels: x.flowLabels(p), Node: p.Node}
	if x.endpoints == nil {
		x.endpoints = map[uint32]*flow.Endpoint{}
	}
	x.endpoints[ipv4Key(ip)] = ep
	return ep
}

// Service implements flowstore.Resolver.
func (l *flowLoop) Service(fe netip.AddrPort, proto uint8) string {
	svc := l.services.Load()
	if svc == nil {
		return ""
	}
	return svc.manager.ServiceOf(datapath.Frontend{Addr: fe.Addr(), Port: fe.Port(), Proto: proto})
}
