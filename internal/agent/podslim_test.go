package agent

import (
	"encoding/json"
	"os"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/policy"
)

// The cached pod gives policy the same pod as the full one, under the same key.
func TestSlimPodKeepsWhatPolicyReads(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{"big": "annotation"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "v"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "web:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "sidecar", Image: "side:1"},
			}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	want, ok := policy.PodOf(full)
	if !ok {
		t.Fatal("policy.PodOf refused the full pod")
	}
	obj, err := slimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	c := obj.(*policyCachedPod)
	if c.Name != "web-1" || c.Namespace != "shop" || c.ResourceVersion != "7" {
		t.Errorf("cache key lost: %+v", c.ObjectMeta)
	}
	got, ok := podPolicyView(c)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("the cached pod gives policy %+v, %v; want %+v", got, ok, want)
	}
	done := full.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	finished, _ := slimPod(done)
	if finished.(*policyCachedPod).Taken {
		t.Errorf("a finished pod is taken: its address may be another pod's")
	}
	if pods := cachedPolicyPods([]any{c, finished, "junk"}, "n1", nil); len(pods) != 1 || pods[0].Name != "web-1" {
		t.Errorf("cachedPolicyPods = %+v, want web-1 only", pods)
	}
	if tomb, _ := slimPod("not a pod"); tomb != "not a pod" {
		t.Errorf("a non-pod object changed: %v", tomb)
	}
}

// A pod of this node whose status has no address yet is taken with its endpoint's
// (CNI ADD gave it one: it must be isolated before it runs); a pod of another node
// without one, or of this node without an endpoint, is not. A status that still names
// an old sandbox's address gives way to the endpoint's.
func TestCachedPolicyPodsEndpointAddress(t *testing.T) {
	mk := func(name, node, ip string) any {
		obj, _ := slimPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, PodIP: ip}})
		return obj
	}
	eps := endpointIPs([]api.Endpoint{
		{PodRef: api.PodRef{Namespace: "shop", Pod: "new"}, IP: "10.244.1.7"},
		{PodRef: api.PodRef{Namespace: "shop", Pod: "moved"}, IP: "10.244.1.8", Created: time.Unix(200, 0)},
		{PodRef: api.PodRef{Namespace: "shop", Pod: "moved"}, IP: "10.244.1.3", Created: time.Unix(100, 0)},
	})
	objs := []any{mk("new", "n1", ""), mk("moved", "n1", "10.244.1.3"), mk("remote", "n2", ""),
		mk("no-endpoint", "n1", ""), mk("running", "n2", "10.244.2.9"),
		mk("stale", "n1", "10.244.1.7")} // its status names the address CNI gave "new" since
	got := map[string]string{}
	for _, p := range cachedPolicyPods(objs, "n1", eps) {
		got[p.Name] = p.IP.String()
		if p.Name == "new" && (p.Labels["app"] != "new" || len(p.Ports) != 1) {
			t.Errorf("the pending pod lost its labels or named ports: %+v", p)
		}
	}
	want := map[string]string{"new": "10.244.1.7", "moved": "10.244.1.8", "running": "10.244.2.9"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cachedPolicyPods took %v, want %v", got, want)
	}
}

// A pod recreated under its name (a StatefulSet's) while the cache still holds the old
// Pod: the new sandbox's endpoint address is not computed with the old Pod's labels
// (by UID); the old Pod stays at the address its status names.
func TestCachedPolicyPodsEndpointOfAnotherUID(t *testing.T) {
	old, _ := slimPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop", UID: "uid-old",
		Labels: map[string]string{"role": "old"}}, Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.3"}})
	for _, c := range []struct {
		uid, want string
	}{
		{"uid-new", "10.244.1.3"}, // another Pod's sandbox: the old Pod keeps its own address only
		{"uid-old", "10.244.1.9"}, // its own sandbox: the endpoint's address
		{"", "10.244.1.9"},        // a runtime without K8S_POD_UID: by name, as before
	} {
		eps := endpointIPs([]api.Endpoint{{PodRef: api.PodRef{Namespace: "shop", Pod: "db-0", PodUID: c.uid}, IP: "10.244.1.9"}})
		var got []string
		for _, p := range cachedPolicyPods([]any{old}, "n1", eps) {
			got = append(got, p.IP.String())
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("endpoint of UID %q: the old Pod computed at %v, want [%s]", c.uid, got, c.want)
		}
	}
}

// A pod as kwok runs it (testdata/kwok-pod.json: what the apiserver returned in
// `myelin scale`, managed fields and status included) takes a third or less of its
// heap once cached for policy: what the policy loop's cache holds per pod of the
// cluster.
func TestSlimPodMemory(t *testing.T) {
	b, err := os.ReadFile("testdata/kwok-pod.json")
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	heapOf := func(slim bool) int64 {
		keep := make([]any, 0, n)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i++ {
			var p corev1.Pod
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			var obj any = &p
			if slim {
				obj, _ = slimPod(obj)
			}
			keep = append(keep, obj)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	}
	// The heap is the process's: goroutines other tests left may free or keep memory
	// between the two readings, so each figure is the median of five.
	median := func(slim bool) int64 {
		var v []int64
		for range 5 {
			v = append(v, heapOf(slim))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	full, slim := median(false), median(true)
	t.Logf("heap per pod: %d bytes as decoded, %d slimmed", full, slim)
	if full <= 0 || slim <= 0 {
		t.Fatalf("heap per pod: %d bytes as decoded, %d slimmed: the heap did not grow by the pods kept", full, slim)
	}
	if slim*3 > full {
		t.Errorf("a cached pod takes %d bytes of heap, the full one %d: want a third or less", slim, full)
	}
}

// Pods with equal labels and ports share one shape, pods with other labels or ports
// get their own, and a shape nobody holds any more is forgotten.
func TestShapeInterner(t *testing.T) {
	in := shapeInterner{shapes: map[string]weak.Pointer[podShape]{}}
	http := []policy.NamedPort{{Name: "http", Proto: policy.ProtoTCP, Port: 8080}}
	a := in.intern(map[string]string{"app": "web", "tier": "front"}, http)
	src := map[string]string{"tier": "front", "app": "web"}
	b := in.intern(src, slices.Clone(http))
	src["app"] = "changed" // the caller's map is not the shared one
	c := in.intern(map[string]string{"app": "webtier", "": "front"}, http)
	d := in.intern(map[string]string{"app": "web", "tier": "front"}, nil)
	if a != b {
		t.Errorf("equal shapes got two copies")
	}
	if a == c || a == d || c == d {
		t.Errorf("different labels or ports share a shape")
	}
	if l, p := a.get(); l["app"] != "web" || len(p) != 1 {
		t.Errorf("the shared shape changed with its source: %v %v", l, p)
	}
	if in.intern(nil, nil) != nil || in.intern(map[string]string{}, nil) != nil {
		t.Errorf("a pod with neither labels nor ports got a shape")
	}
	if n := in.len(); n != 3 {
		t.Fatalf("%d shapes held, want 3", n)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(c)
	runtime.KeepAlive(d)
	// The cleanups run on the runtime's own goroutine after a collection.
	for i := 0; i < 100 && in.len() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := in.len(); n != 0 {
		t.Errorf("%d shapes still held once no pod uses them", n)
	}
}
