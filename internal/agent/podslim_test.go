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

// The slimmed pod gives policy the same pod as the full one, and keeps none of the
// fields policy never reads.
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
	slim := obj.(*corev1.Pod)
	got, ok := policy.PodOf(slim)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("policy.PodOf(slim) = %+v, %v; want %+v", got, ok, want)
	}
	if slim.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %q dropped", slim.Status.Phase)
	}
	if slim.Annotations != nil || slim.ManagedFields != nil || slim.Spec.Volumes != nil || len(slim.Spec.Containers) != 1 ||
		slim.Spec.Containers[0].Image != "" || slim.Status.Conditions != nil {
		t.Errorf("slim pod keeps what policy never reads: %+v", slim)
	}
	if tomb, _ := slimPod("not a pod"); tomb != "not a pod" {
		t.Errorf("a non-pod object changed: %v", tomb)
	}
}

// A pod as kwok runs it (testdata/kwok-pod.json: what the apiserver returned in
// `myelin scale`, managed fields and status included) takes less than half of its
// heap once slimmed (the Pod struct itself is most of what is left): what the policy
// loop's cache holds per pod of the cluster.
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
	if slim*2 > full {
		t.Errorf("a slimmed pod takes %d bytes of heap, the full one %d: want less than half", slim, full)
	}
}
