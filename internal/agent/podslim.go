package agent

import (
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/myelin-net/myelin/internal/policy"
)

// policyCachedPod is what the policy loop's Pod informer stores per pod of the
// cluster: the pod as policy sees it (policy.PodOf) and its key, nothing else. A
// *corev1.Pod, even stripped of all policy never reads, takes 2.2 KB of heap (the
// struct alone is 1.1 KB); this takes under 1 KB, and the computation reads it
// without converting the pod again. With 50,000 pods that is most of the agent's
// memory (docs/scale.md).
type policyCachedPod struct {
	metav1.TypeMeta
	metav1.ObjectMeta // name, namespace and resource version: the cache's key
	Pod               policy.Pod
	Taken             bool // policyInput takes the pod: it has an address and has not finished
	// Pending: the pod has no address in its status yet (Pod has everything else);
	// policyInput takes it with its endpoint's address if it is one of this node's
	// (policyadmit.go: isolated before CNI ADD returns).
	Pending bool
	shape   *podShape // keeps Pod.Labels and Pod.Ports, shared with pods of the same ones
}

// DeepCopyObject implements runtime.Object. Cached pods are never changed, so the
// copy shares the labels and ports.
func (c *policyCachedPod) DeepCopyObject() kruntime.Object {
	cp := *c
	return &cp
}

// slimPod is the transform of the policy loop's Pod informer: it replaces each
// *corev1.Pod by its policyCachedPod before the cache stores it. Other objects
// (tombstones) pass unchanged.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	ns := unique.Make(p.Namespace).Value()
	c := &policyCachedPod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns,
		ResourceVersion: p.ResourceVersion, UID: p.UID}}
	c.Pod, c.Taken = policyPodOf(p)
	if !c.Taken && p.Status.PodIP == "" && !p.Spec.HostNetwork && p.Spec.NodeName != "" && !finished(p) {
		c.Pod, c.Pending = policy.PodWithoutIP(p), true
	}
	if c.Taken || c.Pending {
		c.shape = podShapes.intern(c.Pod.Labels, c.Pod.Ports)
		c.Pod.Labels, c.Pod.Ports = c.shape.get()
		c.Pod.Namespace, c.Pod.Node = ns, unique.Make(c.Pod.Node).Value()
	}
	return c, nil
}

// podShapes holds the label sets and named ports of the cached pods.
var podShapes = shapeInterner{shapes: map[string]weak.Pointer[podShape]{}}

// shapeInterner shares one copy of each distinct pair of label set and named ports
// among the cached pods: a workload's replicas carry the same labels (their
// ReplicaSet's pod-template-hash too) and ports, so 50,000 pods of 10,000 workloads
// hold 10,000 maps instead of 50,000 (~300 B each for two labels), and policy's
// identity keys, made of both, are rendered once per shape (policy's keyer). A shape
// is forgotten once no cached pod holds it.
type shapeInterner struct {
	mu     sync.Mutex
	shapes map[string]weak.Pointer[podShape] // by shapeKey
}

// podShape is one shared label map and port list; nobody changes them.
type podShape struct {
	labels map[string]string
	ports  []policy.NamedPort
}

func (s *podShape) get() (map[string]string, []policy.NamedPort) {
	if s == nil {
		return nil, nil
	}
	return s.labels, s.ports
}

// intern returns the shared shape equal to labels and ports (nil for neither); the
// caller keeps the pointer for as long as it uses them.
func (t *shapeInterner) intern(labels map[string]string, ports []policy.NamedPort) *podShape {
	if len(labels) == 0 && len(ports) == 0 {
		return nil
	}
	key := shapeKey(labels, ports)
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.shapes[key].Value(); s != nil {
		return s
	}
	s := &podShape{labels: maps.Clone(labels), ports: slices.Clone(ports)}
	t.shapes[key] = weak.Make(s)
	runtime.AddCleanup(s, t.forget, key)
	return s
}

// forget drops key's entry once its shape was collected (unless a new one took it).
func (t *shapeInterner) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.shapes[key]; ok && w.Value() == nil {
		delete(t.shapes, key)
	}
}

func (t *shapeInterner) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.shapes)
}

// shapeKey encodes labels (sorted keys, each with its value) and ports (in order)
// unambiguously: every string is preceded by its length.
func shapeKey(labels map[string]string, ports []policy.NamedPort) string {
	var b strings.Builder
	str := func(s string) { b.WriteString(strconv.Itoa(len(s)) + ":" + s) }
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		str(k)
		str(labels[k])
	}
	b.WriteString("|")
	for _, np := range ports {
		str(np.Name)
		b.WriteString(strconv.Itoa(int(np.Proto)) + "/" + strconv.Itoa(int(np.Port)) + ",")
	}
	return b.String()
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// policyPodOf is what policyInput takes of a pod, and whether it takes it at all: a
// finished pod's address may be another pod's already.
func policyPodOf(p *corev1.Pod) (policy.Pod, bool) {
	if finished(p) {
		return policy.Pod{}, false
	}
	return policy.PodOf(p)
}

// cachedPolicyPods are the pods policy takes among the cache's objects: those with an
// address, where this node's pods have their endpoint's (endpointIPs, "namespace/name"
// → the address CNI ADD gave the pod's sandbox): before their status has one (see
// policyadmit.go), and when the status still names an old sandbox's. The endpoint's
// address goes only to the Pod of its UID: a pod recreated under its name (a
// StatefulSet's) whose new Pod the cache does not hold yet must not be computed with
// the old Pod's labels; it waits for its own (admission waits with it). An address this
// node's endpoint holds is that endpoint's pod's alone: another pod whose status still
// names it (finished or terminating, its sandbox gone and the address given again)
// is left out, or whichever of the two the cache listed last would decide the
// address's identity and the new pod's isolation.
func cachedPolicyPods(objs []any, node string, endpointIPs map[string]endpointAddr) []policy.Pod {
	owner := make(map[netip.Addr]string, len(endpointIPs))
	for ref, ep := range endpointIPs {
		owner[ep.ip] = ref
	}
	out := make([]policy.Pod, 0, len(objs))
	for _, o := range objs {
		if c, ok := o.(*policyCachedPod); ok && (c.Taken || c.Pending) && c.Pod.Node == node {
			if ep, ok := endpointIPs[c.Pod.Ref()]; ok && ep.isOf(c.UID) {
				pp := c.Pod
				pp.IP = ep.ip
				out = append(out, pp)
				continue
			}
		}
		if pp, ok := podPolicyView(o); ok {
			if ref, held := owner[pp.IP]; held && ref != pp.Ref() {
				continue // a stale status: this node gave the address to ref
			}
			out = append(out, pp)
		}
	}
	return out
}

// podPolicyView is what policyInput takes of a cached object (or a plain pod).
func podPolicyView(obj any) (policy.Pod, bool) {
	switch o := obj.(type) {
	case *policyCachedPod:
		return o.Pod, o.Taken
	case *corev1.Pod:
		return policyPodOf(o)
	}
	return policy.Pod{}, false
}
