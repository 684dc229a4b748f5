package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/kube"
	"github.com/myelin-net/myelin/internal/policy"
)

// policyResync recomputes and re-applies even without a change (the diff is
// empty when the maps are right, so it costs reads only).
const policyResync = time.Minute

// policyDebounce gathers a burst of changes into one computation.
const policyDebounce = 50 * time.Millisecond

// policyView is one computation and what its apply did, for the API.
type policyView struct {
	input policy.Input
	state policy.State
	// tracer answers the flow reader's policy verdicts about input: compiled here,
	// on the policy loop, once per view, not on the flow reader's goroutine.
	tracer   *policy.Tracer
	started  time.Time // when the computation began: it saw every change made before
	applied  time.Time
	duration time.Duration // compute and apply
	writes   int
	err      error
	// flagsDone and unflagged: the apply reached its flags step, and the local
	// pods whose isolation flags it could not write there (policyApplied).
	flagsDone bool
	unflagged map[netip.Addr]bool
}

// policyLoop enforces NetworkPolicy on this node (docs/policy.md): it watches
// NetworkPolicies, Pods and Namespaces, computes the node's state with
// policy.Compute (pure) and writes it with applyPolicy. It computes nothing
// before its informers synced, so a restarted agent keeps the pinned state
// until it knows the whole cluster again.
type policyLoop struct {
	node    string
	maps    *ipcacheMirror // the datapath's policy maps (policymirror.go)
	purges  *purgeJournal  // tracked connections still to forget (policypurge.go)
	idsPath string
	ids     *policy.Identities
	cs      kube.Client
	loops   *loops
	log     *slog.Logger
	events  *policyEvents
	changed chan struct{}
	view    atomic.Pointer[policyView]

	// ranges checks other nodes' pods' addresses (policyranges.go); nil: unchecked.
	ranges *podRanges
	// claims answers IPAM which addresses this node's Pods still claim (podclaims.go).
	claims podClaims
	// overBudget lists the local pods over their share of the node's tables
	// (datapath.PodsOverBudget; this loop shows the connection table's), for
	// status; nil: not shown.
	overBudget func() (datapath.PodsOverBudget, error)
	// evicted is how many live connections were pushed out of the connection
	// table in the last minute (collector.policyCTEvicted), for status; nil:
	// not shown.
	evicted func() (uint64, error)

	// seeder tracks the open connections of pods about to be isolated in one
	// direction (policyseed.go); nil: not tracked.
	seeder *policySeeder

	// Admission of new endpoints (policyadmit.go).
	endpoints func() []api.Endpoint        // this node's endpoints: their pods' addresses before their status has them
	urgent    chan struct{}                // compute now, without gathering changes first
	caches    atomic.Pointer[policyCaches] // once the informers synced
	admitting sync.Map                     // addresses of the endpoints waiting in admit
	appliedMu sync.Mutex                   // guards applied
	applied   chan struct{}                // closed, and replaced, when a computation is published
}

func newPolicyLoop(node, stateDir string, maps policyMaps, cs kube.Client, endpoints func() []api.Endpoint,
	l *loops, log *slog.Logger) (*policyLoop, error) {
	path := filepath.Join(stateDir, "policy-identities.json")
	ids, err := policy.LoadIdentities(path)
	if err != nil {
		return nil, err
	}
	if err := numberAbovePinned(ids, maps); err != nil {
		return nil, err
	}
	p := &policyLoop{node: node, maps: &ipcacheMirror{policyMaps: maps},
		purges: &purgeJournal{path: filepath.Join(stateDir, "policy-purge.json")}, idsPath: path, ids: ids, cs: cs, loops: l, log: log,
		events: newPolicyEvents(cs, node, log), changed: make(chan struct{}, 1),
		endpoints: endpoints, urgent: make(chan struct{}, 1), applied: make(chan struct{})}
	p.claims.path, p.claims.log = filepath.Join(stateDir, cooldownFile), log
	p.claims.loadCooldowns()
	return p, nil
}

// numberAbovePinned makes the allocator give none of the numbers the pinned policy
// maps hold (Reserve, at every start: after a wrap, a file saved before an apply
// finished does not know them all), and a fresh one (its file missing: a first start,
// or removed while the pins stayed) numbers above them all: a previous agent's numbers
// there would otherwise mean another key's allows between the apply's policy step and
// its ipcache step.
func numberAbovePinned(ids *policy.Identities, maps policyMaps) error {
	cache, err := maps.IPCache()
	if err != nil {
		return fmt.Errorf("read the pinned ipcache for the identities in use: %w", err)
	}
	entries, err := maps.Policies()
	if err != nil {
		return fmt.Errorf("read the pinned policy map for the identities in use: %w", err)
	}
	var top uint32
	var held []uint32
	for _, id := range cache {
		top, held = max(top, id), append(held, id)
	}
	for k := range entries {
		top, held = max(top, k.Identity), append(held, k.Identity)
	}
	if ids.Fresh() {
		ids.Above(top)
	}
	ids.Reserve(held) // after a wrap the top says nothing of the numbers below it
	return nil
}

func (p *policyLoop) poke() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// Run watches and applies until ctx ends (loop "policy").
func (p *policyLoop) Run(ctx context.Context) {
	defer p.claims.stopWriting() // no write into the state directory after Run
	go p.events.run(ctx)
	pods, nss, nps, ok := p.startInformers(ctx)
	if !ok {
		return
	}
	nsLister, npLister := corelisters.NewNamespaceLister(nss.GetIndexer()), networkinglisters.NewNetworkPolicyLister(nps.GetIndexer())
	p.caches.Store(&policyCaches{pods: pods.GetStore(), policies: npLister})
	p.log.Info("policy: informers synced")
	tick := time.NewTicker(policyResync)
	defer tick.Stop()
	for {
		p.compute(ctx, pods.GetStore(), nsLister, npLister)
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
			var last time.Duration
			if v := p.view.Load(); v != nil {
				last = v.duration
			}
			select { // policykick.go; an endpoint waiting for admission cuts it short
			case <-time.After(policyPause(last)):
			case <-p.urgent:
			case <-ctx.Done():
				return
			}
		case <-p.urgent:
		case <-tick.C:
			p.maps.forget() // the resync reads the ipcache map itself
		}
	}
}

// startInformers runs the pod, namespace and policy informers, each change poking
// the loop (and, with ranges, every Node change), and waits until they (and the Node
// informer) synced; false when ctx ended first.
func (p *policyLoop) startInformers(ctx context.Context) (pods, nss, nps cache.SharedIndexInformer, ok bool) {
	pods = kube.NewInformer(p.cs, kube.Pods, slimPod)
	if err := pods.AddIndexers(localPodIPIndexers(p.node)); err != nil { // fails only once the informer runs
		p.log.Error("policy: index pods by address; IPAM may give a new pod an address a Pod being deleted still lists", "err", err)
	} else {
		p.claims.use(pods.GetIndexer()) // also before the informer synced: what it holds is claimed
	}
	nss, nps = kube.NewInformer(p.cs, kube.Namespaces, nil), kube.NewInformer(p.cs, kube.NetworkPolicies, nil)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.poke() },
		UpdateFunc: func(any, any) { p.poke() },
		DeleteFunc: func(any) { p.poke() },
	}
	_, _ = pods.AddEventHandler(podPolicyHandler(p.poke)) // policykick.go
	_, _ = pods.AddEventHandler(p.claims.handler(p.node)) // the cooldown of released addresses
	for _, inf := range []cache.SharedIndexInformer{nss, nps} {
		_, _ = inf.AddEventHandler(h)
	}
	for _, inf := range []cache.SharedIndexInformer{pods, nss, nps} {
		go inf.Run(ctx.Done())
	}
	synced := []cache.InformerSynced{pods.HasSynced, nss.HasSynced, nps.HasSynced}
	if p.ranges != nil { // a Node's PodCIDR decides which pods' addresses are theirs
		synced = append(synced, p.ranges.nodes.informer.HasSynced)
		go p.ranges.follow(ctx, p.poke)
	}
	return pods, nss, nps, cache.WaitForCacheSync(ctx.Done(), synced...)
}

// compute runs one computation from the caches and reports its outcome.
func (p *policyLoop) compute(ctx context.Context, pods cache.Store, nsLister corelisters.NamespaceLister,
	npLister networkinglisters.NetworkPolicyLister) {
	// The pod cache holds policyCachedPods (podslim.go), not Pods: no pod lister.
	// One list of the node's endpoints serves the pods' addresses and the orphans.
	eps := p.endpoints()
	podList := func() []policy.Pod {
		return cachedPolicyPods(pods.List(), p.node, endpointIPs(eps))
	}
	in, err := policyInput(p.node, podList, nsLister.List, npLister.List)
	if err == nil && p.ranges != nil {
		in.Pods = p.ranges.check(in.Pods)
	}
	if err == nil {
		err = p.sync(ctx, in, eps)
	}
	p.loops.report("policy", err)
	if err != nil {
		p.log.Error("policy", "err", err)
	}
}

// sync computes in, applies it and publishes the view; eps are the node's
// endpoints in was made with.
func (p *policyLoop) sync(ctx context.Context, in policy.Input, eps []api.Endpoint) error {
	start := time.Now()
	st := policy.Compute(in, p.ids)
	// The numbers are on disk before any map holds them.
	if err := p.ids.Save(p.idsPath); err != nil {
		return err
	}
	var seed func(map[netip.Addr]datapath.PolicyFlags)
	if p.seeder != nil {
		seed = func(cur map[netip.Addr]datapath.PolicyFlags) { p.seeder.before(st, cur, eps) }
	}
	res, err := applyPolicy(p.maps, p.purges, st, orphanEndpoints(p.node, eps, in.Pods), seed)
	st.Problems = append(st.Problems, applyProblems(st, res)...)
	v := &policyView{input: in, state: st, tracer: policy.NewTracer(in), started: start, applied: time.Now(), duration: time.Since(start), writes: res.writes, err: err,
		flagsDone: res.flagsDone, unflagged: res.unflagged}
	p.view.Store(v)
	p.published()
	if res.writes > 0 {
		p.log.Info("policy applied", "endpoints", len(st.Endpoints), "identities", st.Identities,
			"writes", res.writes, "forgotten connections", res.purged, "took", v.duration)
	}
	p.events.report(in.Policies, st) // queues, never waits (policyevents.go)
	if err != nil {
		return fmt.Errorf("apply network policy: %w", err)
	}
	return nil
}

// orphanEndpoints are the addresses of this node's endpoints (eps) that no pod of
// the node among pods has, each with its pod's namespace/name: their Pod object is
// gone (or finished) while CNI DEL has not removed them yet (keepOrphans).
func orphanEndpoints(node string, eps []api.Endpoint, pods []policy.Pod) map[netip.Addr]string {
	if len(eps) == 0 {
		return nil
	}
	seen := make(map[netip.Addr]bool, len(eps))
	for _, pod := range pods {
		if pod.Node == node && pod.IP.IsValid() {
			seen[pod.IP] = true
		}
	}
	var out map[netip.Addr]string
	for _, ep := range eps {
		ip, err := netip.ParseAddr(ep.IP)
		if err != nil || seen[ip] {
			continue
		}
		if out == nil {
			out = map[netip.Addr]string{}
		}
		out[ip] = ep.Namespace + "/" + ep.Pod
	}
	return out
}

// applyProblems turns entries the apply could not write (a full map) into
// problems of the policies isolating the pod, so they get an Event too.
func applyProblems(st policy.State, res policyApplied) []policy.Problem {
	var out []policy.Problem
	for ip, errs := range res.failed {
		ep := st.Endpoints[ip]
		if ep == nil {
			continue
		}
		msg := fmt.Sprintf("%s: %d allow entries could not be written (%s): the pod fails closed", ep.Pod, len(errs), errs[0])
		for _, name := range append(append([]string{}, ep.IngressPolicies...), ep.EgressPolicies...) {
			out = append(out, policy.Problem{Policy: name, Message: msg})
		}
	}
	return out
}

// policyInput builds the computation's input from the informers' caches.
func policyInput(node string, pods func() []policy.Pod,
	nss func(labels.Selector) ([]*corev1.Namespace, error),
	nps func(labels.Selector) ([]*networkingv1.NetworkPolicy, error)) (policy.Input, error) {
	in := policy.Input{Node: node, Namespaces: map[string]map[string]string{}, Pods: pods()}
	nl, err := nss(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nl {
		in.Namespaces[ns.Name] = ns.Labels
	}
	if in.Policies, err = nps(labels.Everything()); err != nil {
		return in, fmt.Errorf("list network policies: %w", err)
	}
	return in, nil
}

// podName names the pod owning ip ("" if none), for monitor events of
// pods on other nodes.
func (p *policyLoop) podName(ip netip.Addr) string {
	v := p.view.Load()
	if v == nil {
		return ""
	}
	if pod, ok := policy.PodByIP(v.input.Pods, ip); ok {
		return pod.Ref()
	}
	return ""
}
