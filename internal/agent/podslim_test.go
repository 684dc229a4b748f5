package agent

import (
	"reflect"
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
