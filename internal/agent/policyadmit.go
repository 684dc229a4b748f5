package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/api"
)

// Admission: a pod must not send or receive a packet its NetworkPolicies deny, the
// first ones included. Its status has no address until the kubelet reports the one
// CNI ADD gave it, so a computation from the Pod informer alone would isolate the pod
// only after it ran for a while. Instead the endpoint's address completes the pod
// (cachedPolicyPods), and the API's endpoint PUT (the last step of CNI ADD) returns
// only once a computation that includes the pod at that address is applied, when a
// NetworkPolicy exists in its namespace (policies select pods of their own namespace
// only; elsewhere there is nothing to wait for and ADD costs nothing more), or when
// the pod's address may still carry another pod's identity on this node
// (addressStale): IPAM hands a deleted pod's address out again once its Pod is gone
// from the cache, while this node's ipcache maps it to the deleted pod's identity
// until the next computation is applied, and the new pod would meanwhile pass every
// local policy that admits the old one (a tenant can steer round-robin IPAM onto a
// victim's address).

// admitted says whether the endpoint at ip waits in admit: CNI ADD has not
// returned, so its sandbox has run nothing yet (and holds no connection).
func (p *policyLoop) admitted(ip netip.Addr) bool {
	_, waiting := p.admitting.Load(ip)
	return !waiting
}

// policyAdmitTimeout bounds the wait: past it the endpoint is removed again and ADD
// fails (the kubelet retries the sandbox), rather than the pod running unisolated.
const policyAdmitTimeout = 10 * time.Second

// policyAdmitRetry is how often admission asks for another computation while the
// pod is not yet in the informer's cache.
const policyAdmitRetry = 20 * time.Millisecond

// policyCaches are what admission reads of the loop's informers.
type policyCaches struct {
	pods     cache.Store
	policies networkinglisters.NetworkPolicyLister
}

// admit returns once ep's pod is isolated as its namespace's NetworkPolicies say and
// its address carries its own identity, or at once when the namespace has none and
// the address no other pod's; an error when that could not be done within
// policyAdmitTimeout (or ctx).
func (p *policyLoop) admit(ctx context.Context, ep api.Endpoint) error {
	ip, err := netip.ParseAddr(ep.IP)
	if err != nil {
		return fmt.Errorf("endpoint address %q: %w", ep.IP, err)
	}
	ref := ep.Namespace + "/" + ep.Pod
	p.admitting.Store(ip, true)
	defer p.admitting.Delete(ip)
	ctx, cancel := context.WithTimeout(ctx, policyAdmitTimeout)
	defer cancel()
	stale := false // waiting for the address, not for a policy of the namespace
	for {
		c, err := p.awaitSynced(ctx)
		if err != nil {
			return p.admitError(ref, false, err, false)
		}
		nps, err := c.policies.NetworkPolicies(ep.Namespace).List(labels.Everything())
		if err != nil {
			return fmt.Errorf("list NetworkPolicies of %s: %w", ep.Namespace, err)
		}
		stale = false
		if len(nps) == 0 {
			if stale = p.addressStale(ref, ip); !stale {
				return nil
			}
		}
		if _, cached, _ := c.pods.GetByKey(ref); cached {
			break
		}
		// The pod not cached yet: look again shortly.
		select {
		case <-ctx.Done():
			return p.admitError(ref, true, ctx.Err(), stale)
		case <-time.After(policyAdmitRetry):
		}
	}
	for {
		asked := time.Now()
		done := p.awaitPublished()
		select {
		case p.urgent <- struct{}{}:
		default: // a request is pending already; this wait is served by its computation too
		}
		select {
		case <-ctx.Done():
			return p.admitError(ref, true, ctx.Err(), stale)
		case <-done:
		}
		if v := p.view.Load(); v != nil && !v.started.Before(asked) && v.includes(ref, ip) && v.flagsDone && !v.unflagged[ip] {
			return nil
		}
		// A computation that began before the request, without the pod, or whose
		// apply did not write the pod's flags: again.
		select {
		case <-ctx.Done():
			return p.admitError(ref, true, ctx.Err(), stale)
		case <-time.After(policyAdmitRetry):
		}
	}
}

// addressStale says whether ip may still carry another pod's identity in this node's
// ipcache: no computation applied since the agent started (the pinned ipcache is the
// last agent's), the last one's apply wrote nothing (it could not read the maps), or
// its input has another pod at ip (a deleted pod whose address IPAM handed out again
// before the computation dropping it). An address an ipBlock names is no pod's: it
// does not make an ADD wait. (An apply that failed later, at one write, is not held
// against every ADD of the node: the next one is tried at once.)
func (p *policyLoop) addressStale(ref string, ip netip.Addr) bool {
	v := p.view.Load()
	if v == nil || (v.err != nil && !v.flagsDone) {
		return true
	}
	for _, pod := range v.input.Pods {
		if pod.IP == ip && pod.Ref() != ref {
			return true
		}
	}
	return false
}

// awaitSynced returns the loop's caches once its informers synced, or ctx's error.
// Allocation waits for it too (awaitAllocatable): until then the Pod cache may lack a
// Pod being deleted that still lists a free address (podclaims.go).
func (p *policyLoop) awaitSynced(ctx context.Context) (*policyCaches, error) {
	for {
		if c := p.caches.Load(); c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(policyAdmitRetry):
		}
	}
}

// awaitAllocatable returns once IPAM may hand out an address: the claims of Pods being
// deleted are known (awaitSynced), within policyAdmitTimeout; else an error for the
// ADD, which the kubelet retries.
func (p *policyLoop) awaitAllocatable(ctx context.Context, ref api.PodRef) error {
	ctx, cancel := context.WithTimeout(ctx, policyAdmitTimeout)
	defer cancel()
	if _, err := p.awaitSynced(ctx); err != nil {
		return fmt.Errorf("no pod IP for %s/%s yet: the agent's Pod cache has not synced with the apiserver (%w), "+
			"so it can't tell which free addresses Pods being deleted still hold; the kubelet retries; "+
			"see the agent's policy loop in myelin status", ref.Namespace, ref.Pod, waited(err))
	}
	return nil
}

// admitError is admit's refusal of ref; stale: it waited because ref's address may
// still carry another pod's identity, not for a policy of its namespace.
func (p *policyLoop) admitError(ref string, synced bool, err error, stale bool) error {
	what := "the agent's Pod, Namespace and NetworkPolicy caches have not synced with the apiserver"
	switch {
	case synced && stale:
		what = fmt.Sprintf("its address may still carry another pod's identity on this node (a deleted pod's; or no "+
			"policy computation applied since the agent started, or the last one wrote nothing), and no computation included pod %s at it", ref)
	case synced:
		what = fmt.Sprintf("no policy computation included pod %s at its address", ref)
	}
	return fmt.Errorf("NetworkPolicy for pod %s is not in place: %s (%w); the pod must not run unisolated, "+
		"so its network is removed and the kubelet retries; see the agent's policy loop in myelin status", ref, what, waited(err))
}

// waited says how long a wait bounded by policyAdmitTimeout took when that bound ended
// it, rather than "context deadline exceeded"; other errors stay as they are.
func waited(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("waited %s", policyAdmitTimeout)
	}
	return err
}

// awaitPublished returns a channel closed when the next computation is published.
func (p *policyLoop) awaitPublished() <-chan struct{} {
	p.appliedMu.Lock()
	defer p.appliedMu.Unlock()
	return p.applied
}

// published wakes everyone waiting for a computation (sync, after it stored the view).
func (p *policyLoop) published() {
	p.appliedMu.Lock()
	defer p.appliedMu.Unlock()
	close(p.applied)
	p.applied = make(chan struct{})
}

// includes says whether the computation saw pod ref at ip.
func (v *policyView) includes(ref string, ip netip.Addr) bool {
	for _, pod := range v.input.Pods {
		if pod.IP == ip && pod.Ref() == ref {
			return true
		}
	}
	return false
}

// endpointAddr is the address CNI ADD gave a pod's sandbox, and the pod's UID as the
// runtime passed it (K8S_POD_UID; "" when it passed none).
type endpointAddr struct {
	ip  netip.Addr
	uid string
}

// isOf says whether the endpoint is the Pod of uid's: its UID is that one, or either is
// unknown (a runtime without K8S_POD_UID, an endpoint recorded before UIDs were).
func (e endpointAddr) isOf(uid types.UID) bool {
	return e.uid == "" || uid == "" || e.uid == string(uid)
}

// endpointIPs maps "namespace/name" to the address of each of this node's endpoints;
// of a pod with two (an old sandbox not yet deleted), the newer one's.
func endpointIPs(eps []api.Endpoint) map[string]endpointAddr {
	out := make(map[string]endpointAddr, len(eps))
	created := make(map[string]time.Time, len(eps))
	for _, ep := range eps {
		ip, err := netip.ParseAddr(ep.IP)
		ref := ep.Namespace + "/" + ep.Pod
		if err != nil || ep.Created.Before(created[ref]) {
			continue
		}
		out[ref], created[ref] = endpointAddr{ip: ip, uid: ep.PodUID}, ep.Created
	}
	return out
}
