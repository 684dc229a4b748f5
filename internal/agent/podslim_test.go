package agent

import (
	"encoding/json"
	"os"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	if pods := cachedPolicyPods([]any{c, finished, "junk"}); len(pods) != 1 || pods[0].Name != "web-1" {
		t.Errorf("cachedPolicyPods = %+v, want web-1 only", pods)
	}
	if tomb, _ := slimPod("not a pod"); tomb != "not a pod" {
		t.Errorf("a non-pod object changed: %v", tomb)
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
	heapOf := func(slim bool) uint64 {
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
		return (after.HeapAlloc - before.HeapAlloc) / n
	}
	full, slim := heapOf(false), heapOf(true)
	t.Logf("heap per pod: %d bytes as decoded, %d slimmed", full, slim)
	if slim*3 > full {
		t.Errorf("a cached pod takes %d bytes of heap, the full one %d: want a third or less", slim, full)
	}
}
