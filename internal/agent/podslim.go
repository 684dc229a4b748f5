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
	labels  *labelSet // keeps Pod.Labels, shared with pods of the same labels, interned
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
		ResourceVersion: p.ResourceVersion}}
	c.Pod, c.Taken = policyPodOf(p)
	if !c.Taken && p.Status.PodIP == "" && !p.Spec.HostNetwork && p.Spec.NodeName != "" && !finished(p) {
		c.Pod, c.Pending = policy.PodWithoutIP(p), true
	}
	c.labels = podLabels.intern(c.Pod.Labels)
	c.Pod.Labels = c.labels.get()
	c.Pod.Namespace, c.Pod.Node = ns, unique.Make(c.Pod.Node).Value()
	return c, nil
}

// podLabels holds the label sets of the cached pods.
var podLabels = labelInterner{sets: map[string]weak.Pointer[labelSet]{}}

// labelInterner shares one copy of each distinct label set among the cached pods: a
// workload's replicas carry the same labels (their ReplicaSet's pod-template-hash
// too), so 50,000 pods of 10,000 workloads hold 10,000 maps instead of 50,000 (~300 B
// each for two labels). A set is forgotten once no cached pod holds it.
type labelInterner struct {
	mu   sync.Mutex
	sets map[string]weak.Pointer[labelSet] // by labelKey
}

// labelSet is one shared label map; nobody changes it.
type labelSet struct{ m map[string]string }

func (s *labelSet) get() map[string]string {
	if s == nil {
		return nil
	}
	return s.m
}

// intern returns the shared set equal to l (nil for no labels); the caller keeps the
// pointer for as long as it uses the map.
func (t *labelInterner) intern(l map[string]string) *labelSet {
	if len(l) == 0 {
		return nil
	}
	key := labelKey(l)
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sets[key].Value(); s != nil {
		return s
	}
	s := &labelSet{m: maps.Clone(l)}
	t.sets[key] = weak.Make(s)
	runtime.AddCleanup(s, t.forget, key)
	return s
}

// forget drops key's entry once its set was collected (unless a new set took it).
func (t *labelInterner) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.sets[key]; ok && w.Value() == nil {
		delete(t.sets, key)
	}
}

func (t *labelInterner) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sets)
}

// labelKey encodes l unambiguously: its sorted keys, each with its value, lengths first.
func labelKey(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		v := l[k]
		b.WriteString(strconv.Itoa(len(k)) + ":" + k + strconv.Itoa(len(v)) + ":" + v)
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
// policyadmit.go), and when the status still names an old sandbox's.
func cachedPolicyPods(objs []any, node string, endpointIPs map[string]netip.Addr) []policy.Pod {
	out := make([]policy.Pod, 0, len(objs))
	for _, o := range objs {
		if c, ok := o.(*policyCachedPod); ok && (c.Taken || c.Pending) && c.Pod.Node == node {
			if ip, ok := endpointIPs[c.Pod.Ref()]; ok {
				pp := c.Pod
				pp.IP = ip
				out = append(out, pp)
				continue
			}
		}
		if pp, ok := podPolicyView(o); ok {
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
