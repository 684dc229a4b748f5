package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// eventRecorder writes core/v1 Events about Pods, as kubelet does (same reasons, so
// `kubectl describe pod` reads the same as on a real node).
type eventRecorder struct {
	cs   kubernetes.Interface
	node string
}

func (r *eventRecorder) record(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: pod.Name + ".",
			Namespace:    pod.Namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1",
		},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: "kubelet", Host: r.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "myelin.io/lab-kubelet", ReportingInstance: r.node,
	}
	if _, err := r.cs.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		fmt.Printf("record event %s on %s/%s: %v\n", reason, pod.Namespace, pod.Name, err)
	}
}
