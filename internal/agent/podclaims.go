package agent

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/statefile"
)

// Address claims: a pod being deleted keeps its address in its status after CNI DEL
// released it, until the kubelet reports it finished or its Pod object is gone. Every
// node's policy loop maps the address to that pod's identity until then
// (cachedPolicyPods), so IPAM must not give it to a new pod meanwhile: the other nodes
// would allow and deny the new pod as the old one; nor for claimCooldown after, while
// they apply the computation without it. The policy loop's Pod cache, which
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

// claimCooldown is how long an address stays claimed after the last Pod of this node
// listing it stopped (deleted, finished, or given another address): every other node
// maps it to that Pod's identity until its own computation without the Pod is applied
// (its watch's delay, a pause of up to 2 s, the computation, which a tenant's
// selector-heavy policies lengthen), and a new pod given it meanwhile would be that Pod
// there. This node's own admission waits for its computation (addressStale).
const claimCooldown = 10 * time.Second

// podClaims answers which of this node's addresses a Pod still claims, from the
// policy loop's Pod cache once the loop indexed it (use), and which a Pod claimed
// less than claimCooldown ago (released); before use, none. With a path, the
// cooldowns are kept there (loadCooldowns), so an agent restarted within one keeps
// it: the Pod is gone from the apiserver's list by then.
type podClaims struct {
	pods atomic.Pointer[cache.Indexer]
	node string
	path string // the cooldowns' file; "" keeps them in memory only
	log  *slog.Logger
	mu   sync.Mutex
	gone map[netip.Addr]time.Time // when a local Pod stopped claiming the address
	seq  uint64                   // counts changes of gone that are to be written
	now  func() time.Time         // nil: time.Now
	// writeMu orders the file's writes, which happen outside mu: claimed takes mu
	// on CNI ADD's path, which must not wait for a file's sync.
	writeMu sync.Mutex
	written uint64 // the seq of the last write
	stopped bool   // stopWriting was called
}

// cooldownFile is the cooldowns' file in the state directory.
const cooldownFile = "address-cooldowns.json"

// loadCooldowns reads the cooldowns a previous agent kept in c.path, those still
// running. A start time in the future (the clock was set back) counts from now. An
// unreadable file is logged and cools nothing: the cooldown narrows a window, the
// agent runs without it.
func (c *podClaims) loadCooldowns() {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var stored map[netip.Addr]int64 // unix nanoseconds, wall clock
	if err == nil {
		err = json.Unmarshal(b, &stored)
	}
	if err != nil {
		c.log.Warn("address cooldowns not read: addresses released just before this start may be handed out at once", "file", c.path, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	for ip, ns := range stored {
		at := time.Unix(0, ns)
		if at.After(now) {
			at = now
		}
		if now.Sub(at) < claimCooldown {
			if c.gone == nil {
				c.gone = map[netip.Addr]time.Time{}
			}
			c.gone[ip] = at
		}
	}
}

// cooldownsLocked is what the file is to hold (c.mu held): the running cooldowns,
// as wall-clock unix nanoseconds, and their seq; the passed ones are dropped.
func (c *podClaims) cooldownsLocked() (map[netip.Addr]int64, uint64) {
	now, stored := c.clock(), map[netip.Addr]int64{}
	for ip, at := range c.gone {
		if now.Sub(at) >= claimCooldown {
			delete(c.gone, ip)
			continue
		}
		stored[ip] = at.UnixNano()
	}
	c.seq++
	return stored, c.seq
}

// saveCooldowns writes stored (of seq) to c.path unless a later one was written.
func (c *podClaims) saveCooldowns(stored map[netip.Addr]int64, seq uint64) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.stopped || seq <= c.written {
		return
	}
	b, err := json.Marshal(stored)
	if err == nil {
		err = statefile.Write(c.path, b, 0o600)
	}
	if err != nil {
		c.log.Warn("address cooldowns not kept: an agent restarted within one may hand its address out at once", "file", c.path, "err", err)
		return
	}
	c.written = seq
}

// stopWriting ends the cooldowns' writes: once it returns none is under way and none
// starts. The policy loop calls it when it ends, since its informer's handlers may
// still run then.
func (c *podClaims) stopWriting() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.stopped = true
}

// handler records, from the Pod informer's events, when a Pod of node stops claiming
// its address (released).
func (c *podClaims) handler(node string) cache.ResourceEventHandlerFuncs {
	c.node = node
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, okOld := old.(*policyCachedPod)
			n, okNew := cur.(*policyCachedPod)
			if okOld && c.takes(o) && (!okNew || !c.takes(n) || n.Pod.IP != o.Pod.IP) {
				c.released(o.Pod.IP)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(*policyCachedPod); ok && c.takes(o) {
				c.released(o.Pod.IP)
			}
		},
	}
}

// takes says whether pod is one of this node's that claims its address.
func (c *podClaims) takes(pod *policyCachedPod) bool { return pod.Taken && pod.Pod.Node == c.node }

// released starts ip's cooldown and writes the cooldowns to c.path, if any.
func (c *podClaims) released(ip netip.Addr) {
	c.mu.Lock()
	if c.gone == nil {
		c.gone = map[netip.Addr]time.Time{}
	}
	c.gone[ip] = c.clock()
	if c.path == "" {
		c.mu.Unlock()
		return
	}
	stored, seq := c.cooldownsLocked()
	c.mu.Unlock()
	c.saveCooldowns(stored, seq)
}

func (c *podClaims) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// cooling says whether ip's cooldown runs, forgetting it once it has passed.
func (c *podClaims) cooling(ip netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.gone[ip]
	if !ok {
		return false
	}
	if c.clock().Sub(at) < claimCooldown {
		return true
	}
	delete(c.gone, ip)
	return false
}

// use makes claimed read pods, whose objects are indexed by localPodIPIndexers.
func (c *podClaims) use(pods cache.Indexer) { c.pods.Store(&pods) }

// claimed says whether a pod of this node other than the one of UID uid has ip in its
// status and is not finished, or one stopped doing so less than claimCooldown ago
// (endpoint.AddressClaims). One index lookup: it runs on CNI ADD's path, once per
// free address the allocation looks at.
func (c *podClaims) claimed(ip netip.Addr, uid string) bool {
	pods := c.pods.Load()
	if pods == nil {
		return false
	}
	if c.cooling(ip) {
		return true
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
