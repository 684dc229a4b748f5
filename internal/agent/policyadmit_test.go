package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/kube/kubefake"
	"github.com/myelin-net/myelin/internal/policy"
)

// A new pod in a namespace with a NetworkPolicy is isolated when admit returns, while
// its status has no address yet (the kubelet reports it only after CNI ADD); a pod in a
// namespace without one is admitted at once, isolated by nothing; a pod the agent's
// caches don't know is refused, not let run unisolated.
func TestPolicyAdmit(t *testing.T) {
	pending := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	}
	denyAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
	cs := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}},
		denyAll, pending("shop", "new"), pending("open", "free"))
	newEp := api.Endpoint{PodRef: api.PodRef{Namespace: "shop", Pod: "new"}, IP: "10.244.1.7"}
	freeEp := api.Endpoint{PodRef: api.PodRef{Namespace: "open", Pod: "free"}, IP: "10.244.1.8"}
	maps := &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()}
	p, ctx := startPolicyLoop(t, cs, maps, newEp, freeEp)

	if err := p.admit(ctx, newEp); err != nil {
		t.Errorf("admit shop/new: %v", err)
	}
	if fl := maps.flagsOf("10.244.1.7"); fl&datapath.PolicyIngress == 0 || fl&datapath.PolicyEgress == 0 {
		t.Errorf("shop/new's flags when admit returned = %v, want ingress and egress isolation", fl)
	}
	if err := p.admit(ctx, freeEp); err != nil {
		t.Errorf("admit open/free: %v", err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	err := p.admit(short, api.Endpoint{PodRef: api.PodRef{Namespace: "shop", Pod: "ghost"}, IP: "10.244.1.9"})
	stop()
	if err == nil || !strings.Contains(err.Error(), "shop/ghost") || !strings.Contains(err.Error(), "not in place") {
		t.Errorf("admit of a pod the caches don't have = %v, want a refusal naming it", err)
	}
	if fl := maps.flagsOf("10.244.1.8"); fl != 0 {
		t.Errorf("open/free is isolated (%v) with no policy in its namespace", fl)
	}
}

// A deleted pod's address handed to a new pod in a namespace without NetworkPolicy
// still maps to the deleted pod's identity in this node's ipcache until the next
// computation is applied; the new pod would pass every local policy that admits the
// old one. So admit returns only once the address carries the new pod's identity,
// and, before any computation was applied since the agent started (the pinned
// ipcache is the last agent's), waits for one; an address no pod held is admitted at
// once as before.
func TestPolicyAdmitWaitsForAReusedAddress(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "open", Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
	}
	// A policy elsewhere that admits the old pod: its identity is worth stealing.
	admitsOld := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "bank", Name: "from-old"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "old"}}}}}}}}
	const reused = "10.244.1.8"
	cs := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bank"}}, admitsOld,
		pod("old", corev1.PodRunning, reused), pod("new", corev1.PodPending, ""), pod("fresh", corev1.PodPending, ""),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bank", Name: "vault"}, Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.50"}})
	vaultEp := api.Endpoint{PodRef: api.PodRef{Namespace: "bank", Pod: "vault"}, IP: "10.244.1.50"}
	oldEp := api.Endpoint{PodRef: api.PodRef{Namespace: "open", Pod: "old"}, IP: reused}
	newEp := api.Endpoint{PodRef: api.PodRef{Namespace: "open", Pod: "new"}, IP: reused}
	freshEp := api.Endpoint{PodRef: api.PodRef{Namespace: "open", Pod: "fresh"}, IP: "10.244.1.9"}
	maps := &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()}
	var mu sync.Mutex
	eps := []api.Endpoint{oldEp, vaultEp}
	p, ctx := startPolicyLoopWith(t, cs, maps, func() []api.Endpoint { mu.Lock(); defer mu.Unlock(); return slices.Clone(eps) })

	short, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	vault := netip.MustParseAddr(vaultEp.IP)
	admitted := func() bool {
		return maps.flagsOf(vaultEp.IP)&datapath.PolicyIngress != 0 && maps.cacheOf(reused) != 0 &&
			maps.allowsNow(netip.MustParseAddr(reused), vault, 80)
	}
	for !admitted() && short.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	oldID := maps.cacheOf(reused)
	if !admitted() {
		t.Fatalf("open/old at %s never let into bank/vault before the test", reused)
	}
	// The old pod goes; its address is handed to the new one (its endpoint takes it).
	if err := cs.CoreV1().Pods("open").Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	eps = []api.Endpoint{newEp, freshEp, vaultEp}
	mu.Unlock()
	if err := p.admit(ctx, newEp); err != nil {
		t.Fatalf("admit open/new: %v", err)
	}
	if id := maps.cacheOf(reused); id == oldID || id == 0 {
		t.Errorf("%s's identity when admit of open/new returned = %d, want the new pod's, not the deleted pod's %d", reused, id, oldID)
	}
	if maps.allowsNow(netip.MustParseAddr(reused), vault, 80) {
		t.Errorf("open/new at %s is let into bank/vault, which admits only open/old", reused)
	}
	if p.addressStale("open/fresh", netip.MustParseAddr(freshEp.IP)) {
		t.Errorf("addressStale of an address no pod held = true, want false (admitted at once)")
	}
}

// A policy loop without its identities file (a first start, or the file removed
// while the pins stayed) numbers new identities above every one the pinned maps
// hold; with the file, the file's numbers stand.
func TestPolicyLoopNumbersAbovePinned(t *testing.T) {
	maps := newFakePolicyMaps()
	maps.cache[netip.MustParsePrefix("10.244.0.5/32")] = 300
	maps.entries[datapath.PolicyKey{Endpoint: netip.MustParseAddr("10.244.1.7"), Identity: 310}] = nil
	dir := t.TempDir()
	p, err := newPolicyLoop("n1", dir, maps, kubefake.Wrap(fake.NewSimpleClientset()), func() []api.Endpoint { return nil },
		newLoops(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.ids.Next(); got != 311 {
		t.Errorf("fresh allocator next to pinned identities up to 310: next %d, want 311", got)
	}
	if err := policy.NewIdentities().Save(p.idsPath); err != nil {
		t.Fatal(err)
	}
	if p, err = newPolicyLoop("n1", dir, maps, kubefake.Wrap(fake.NewSimpleClientset()), func() []api.Endpoint { return nil },
		newLoops(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if got := p.ids.Next(); got != 256 {
		t.Errorf("allocator read from its file: next %d, want the file's 256", got)
	}
	// A pinned number the file does not know (saved before an apply finished, after
	// the counter wrapped) is given to no new key: the start reserves every one.
	maps.cache[netip.MustParsePrefix("10.244.0.6/32")] = 256
	if p, err = newPolicyLoop("n1", dir, maps, kubefake.Wrap(fake.NewSimpleClientset()), func() []api.Endpoint { return nil },
		newLoops(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	pod := policy.Pod{Namespace: "x", Name: "a", IP: netip.MustParseAddr("10.244.0.9"), Node: "n2"}
	st := policy.Compute(policy.Input{Node: "n1", Pods: []policy.Pod{pod}}, p.ids)
	if got := st.IPCache[netip.PrefixFrom(pod.IP, 32)]; got == 256 || got < 256 {
		t.Errorf("first new key after a start beside pinned 256: identity %d, want none of the pinned numbers", got)
	}
}

// addressStale, view by view: stale before any computation was applied, after one
// whose apply wrote nothing, and while the last one has another pod at the address; not for
// an address no pod of its input holds (an ipBlock /32 naming it included) or held by
// the pod asking.
func TestAddressStale(t *testing.T) {
	ip := netip.MustParseAddr("10.244.1.8")
	withPod := func(ref string) *policyView {
		ns, name, _ := strings.Cut(ref, "/")
		return &policyView{input: policy.Input{Pods: []policy.Pod{{Namespace: ns, Name: name, IP: ip}}}}
	}
	cidrOnly := &policyView{state: policy.State{IPCache: map[netip.Prefix]uint32{netip.PrefixFrom(ip, 32): 300}}}
	failed := withPod("open/new")
	failed.err = errors.New("apply: the map can't be read")
	failedLate := withPod("open/new")
	failedLate.err, failedLate.flagsDone = errors.New("apply: purge: busy"), true
	p := &policyLoop{}
	for _, c := range []struct {
		name string
		view *policyView
		want bool
	}{
		{"no computation applied yet", nil, true},
		{"the last apply wrote nothing", failed, true},
		{"the last apply failed after its writes", failedLate, false},
		{"another pod at the address", withPod("open/old"), true},
		{"the pod itself at the address", withPod("open/new"), false},
		{"an ipBlock /32 of the address, no pod", cidrOnly, false},
		{"nobody at the address", &policyView{}, false},
	} {
		p.view.Store(c.view)
		if got := p.addressStale("open/new", ip); got != c.want {
			t.Errorf("%s: addressStale = %v, want %v", c.name, got, c.want)
		}
	}
}

// An ADD in a namespace without policy that waits for its address (no computation
// applied since the agent started) and times out says why, not "no policy".
func TestPolicyAdmitStaleAddressRefusal(t *testing.T) {
	pods := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "open", Name: "new"}}); err != nil {
		t.Fatal(err)
	}
	p := &policyLoop{urgent: make(chan struct{}, 1), applied: make(chan struct{})}
	p.caches.Store(&policyCaches{pods: pods,
		policies: networkinglisters.NewNetworkPolicyLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := p.admit(ctx, api.Endpoint{PodRef: api.PodRef{Namespace: "open", Pod: "new"}, IP: "10.244.1.8"})
	if err == nil || !strings.Contains(err.Error(), "its address may still carry another pod's identity") || !strings.Contains(err.Error(), "open/new") {
		t.Errorf("admit with no computation applied = %v, want a refusal naming the pod and its address's reason", err)
	}
}

// startPolicyLoop runs a policy loop of node n1 over cs and maps, with eps as the
// node's endpoints, until the test ends; ctx ends with it.
func startPolicyLoop(t *testing.T, cs *fake.Clientset, maps policyMaps, eps ...api.Endpoint) (*policyLoop, context.Context) {
	t.Helper()
	return startPolicyLoopWith(t, cs, maps, func() []api.Endpoint { return eps })
}

// startPolicyLoopWith is startPolicyLoop with the node's endpoints from endpoints.
func startPolicyLoopWith(t *testing.T, cs *fake.Clientset, maps policyMaps, endpoints func() []api.Endpoint) (*policyLoop, context.Context) {
	t.Helper()
	p, err := newPolicyLoop("n1", t.TempDir(), maps, kubefake.Wrap(cs), endpoints,
		newLoops(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { p.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })
	return p, ctx
}

// lockedPolicyMaps lets a test read the endpoint flags while the policy loop writes
// them: the loop's only writes to the flags go through SetPolicyFlags.
type lockedPolicyMaps struct {
	mu sync.Mutex
	*fakePolicyMaps
	refuse     netip.Addr // SetPolicyFlags of this address fails
	unreadable bool       // PolicyFlagsAll fails
}

func (l *lockedPolicyMaps) PolicyFlagsAll() (map[netip.Addr]datapath.PolicyFlags, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unreadable {
		return nil, errors.New("the map can't be read")
	}
	return l.fakePolicyMaps.PolicyFlagsAll()
}

func (l *lockedPolicyMaps) flagsOf(ip string) datapath.PolicyFlags {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flags[netip.MustParseAddr(ip)]
}

func (l *lockedPolicyMaps) SetIPCache(p netip.Prefix, id uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakePolicyMaps.SetIPCache(p, id)
}

func (l *lockedPolicyMaps) DeleteIPCache(p netip.Prefix) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakePolicyMaps.DeleteIPCache(p)
}

func (l *lockedPolicyMaps) IPCache() (map[netip.Prefix]uint32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fakePolicyMaps.IPCache()
}

// allowsNow is fakePolicyMaps.allows while the loop writes.
func (l *lockedPolicyMaps) allowsNow(src, dst netip.Addr, port uint16) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allows(src, dst, port)
}

// cacheOf is ip's /32 identity in the ipcache, 0 for none.
func (l *lockedPolicyMaps) cacheOf(ip string) uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cache[netip.PrefixFrom(netip.MustParseAddr(ip), 32)]
}

func (l *lockedPolicyMaps) SetPolicyFlags(ip netip.Addr, fl datapath.PolicyFlags) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse == ip {
		return errors.New("the map refuses the write")
	}
	return l.fakePolicyMaps.SetPolicyFlags(ip, fl)
}

// refuseFlags makes SetPolicyFlags of ip fail (the zero address: none) and
// PolicyFlagsAll fail when unreadable.
func (l *lockedPolicyMaps) refuseFlags(ip netip.Addr, unreadable bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refuse, l.unreadable = ip, unreadable
}

// A pod whose isolation flags could not be written is not admitted: it would run
// unisolated; nor when the apply could not read the maps (it wrote nothing). Once
// a later apply writes them, it is.
func TestPolicyAdmitWaitsForTheFlags(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "new"},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	denyAll := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	cs := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, denyAll, pod)
	ep := api.Endpoint{PodRef: api.PodRef{Namespace: "shop", Pod: "new"}, IP: "10.244.1.7"}
	maps := &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()}
	maps.refuseFlags(netip.Addr{}, true)
	p, ctx := startPolicyLoop(t, cs, maps, ep)

	for _, c := range []struct {
		name       string
		refuse     netip.Addr
		unreadable bool
	}{
		{"while the maps can't be read", netip.Addr{}, true},
		{"while the flags can't be written", netip.MustParseAddr(ep.IP), false},
	} {
		maps.refuseFlags(c.refuse, c.unreadable)
		short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
		err := p.admit(short, ep)
		stop()
		if err == nil || !strings.Contains(err.Error(), "not in place") {
			t.Errorf("admit %s = %v, want a refusal", c.name, err)
		}
	}
	maps.refuseFlags(netip.Addr{}, false)
	if err := p.admit(ctx, ep); err != nil {
		t.Errorf("admit once the flags can be written: %v", err)
	}
	if fl := maps.flagsOf(ep.IP); fl&datapath.PolicyIngress == 0 {
		t.Errorf("flags when admit returned = %v, want ingress isolation", fl)
	}
}

// PUT of an endpoint before the policy loop is registered is refused as the agent
// not being ready (503: retry), naming the pod, and registers nothing: the pod would
// run unisolated. Once the loop is registered, the same PUT is admitted.
func TestPutEndpointWaitsForThePolicyLoop(t *testing.T) {
	a, node := serveTest(t)
	a.ready.Store(true)
	c, ctx := api.NewClient(a.cfg.socket()), context.Background()
	ref := api.PodRef{ContainerID: "c1", Namespace: "open", Pod: "free"}
	alloc, err := c.Allocate(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	node.links[alloc.HostIfName] = 7
	ep := api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: 7,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"}
	_, err = c.PutEndpoint(ctx, ep)
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "open/free") || !strings.Contains(err.Error(), "retry") {
		t.Errorf("PUT before the policy loop = %v, want unavailable naming open/free and to retry", err)
	}
	if got, ok := a.eps.Get("c1"); ok {
		t.Errorf("the refused PUT registered %+v", got)
	}

	cs := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "open", Name: "free"},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}})
	p, _ := startPolicyLoop(t, cs, &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()}, ep)
	a.views.add(p)
	if _, err := c.PutEndpoint(ctx, ep); err != nil {
		t.Errorf("PUT with the policy loop registered = %v", err)
	}
	if _, ok := a.eps.Get("c1"); !ok {
		t.Error("the admitted endpoint is not registered")
	}
}

// An allocation waits for the policy loop's caches: before they synced, IPAM can't
// tell which free addresses Pods being deleted still hold (podclaims.go). So an
// allocation whose wait ends first allocates nothing, and one made once the loop runs
// gets its address; awaitAllocatable's refusal names the pod and says the kubelet retries.
func TestAllocateWaitsForThePolicyCaches(t *testing.T) {
	a, _ := serveTest(t)
	a.ready.Store(true)
	cs := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}})
	p, err := newPolicyLoop("n1", t.TempDir(), &lockedPolicyMaps{fakePolicyMaps: newFakePolicyMaps()}, kubefake.Wrap(cs),
		func() []api.Endpoint { return nil }, newLoops(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.views.add(p) // registered, not running: its caches never sync
	c := api.NewClient(a.cfg.socket())
	ref := api.PodRef{ContainerID: "c1", Namespace: "open", Pod: "free", PodUID: "u1"}

	short, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.Allocate(short, ref)
	stop()
	if err == nil {
		t.Fatal("allocation before the policy caches synced succeeded")
	}
	if ip, ok := a.pool.Lookup("c1"); ok {
		t.Errorf("the allocation that waited for the caches took %s", ip)
	}
	short, stop = context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = p.awaitAllocatable(short, ref)
	stop()
	if err == nil || !strings.Contains(err.Error(), "open/free") || !strings.Contains(err.Error(), "retries") {
		t.Errorf("awaitAllocatable before the caches synced = %v, want a refusal naming open/free", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { p.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })
	alloc, err := c.Allocate(ctx, ref)
	if err != nil {
		t.Fatalf("allocation once the policy loop runs: %v", err)
	}
	if ip, ok := a.pool.Lookup("c1"); !ok || ip.String() != alloc.IP {
		t.Errorf("pool holds %s (%v) for c1, want the allocated %s", ip, ok, alloc.IP)
	}
}
