package agent

import (
	"net/netip"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// Address claims: a pod being deleted keeps its address in its status after CNI DEL
// released it, until the kubelet reports it finished or its Pod object is gone. Every
// node's policy loop maps the address to that pod's identity until then
// (cachedPolicyPods), so IPAM must not give it to a new pod meanwhile: the other nodes
// would allow and deny the new pod as the old one. The policy loop's Pod cache, which
// holds every pod of the cluster, is indexed by the address of this node's pods that
// policy takes, and IPAM asks the index (endpoint.Manager.UseAddressClaims).

// localPodIPIndex is the Pod cache's index of this node's pods by address.
const localPodIPIndex = "localPodIP"

// localPodIPIndexers index the policyCachedPods of node's pods that policy takes
// (Taken: an address in the status, not finished) by that address; other nodes'
// pods, far more, are not indexed.
func localPodIPIndexers(node string) cache.Indexers {
	return cache.Indexers{localPodIPIndex: func(obj any) ([]string, error) {
		c, ok := obj.(*policyCachedPod)
		if !ok || !c.Taken || c.Pod.Node != node {
			return nil, nil
		}
		return []string{c.Pod.IP.String()}, nil
	}}
}

// podClaims answers which of this node's addresses a Pod still claims, from the
// policy loop's Pod cache once the loop indexed it (use); before, none.
type podClaims struct {
	pods atomic.Pointer[cache.Indexer]
}

// use makes claimed read pods, whose objects are indexed by localPodIPIndexers.
func (c *podClaims) use(pods cache.Indexer) { c.pods.Store(&pods) }

// claimed says whether a pod of this node other than the one of UID uid has ip in its
// status and is not finished (endpoint.AddressClaims). One index lookup: it runs on
// CNI ADD's path, once per free address the allocation looks at.
func (c *podClaims) claimed(ip netip.Addr, uid string) bool {
	pods := c.pods.Load()
	if pods == nil {
		return false
	}
	objs, err := (*pods).ByIndex(localPodIPIndex, ip.String())
	if err != nil {
		return false // the index is added before the informer runs: not reached
	}
	for _, o := range objs {
		if p, ok := o.(*policyCachedPod); ok && p.Taken && string(p.UID) != uid {
			return true
		}
	}
	return false
}
