package kwok

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/parallel"
)

// ReadyAgain marks the running simulated pods that are not ready ready again, as a
// kubelet's next status update would, and returns how many it marked. When kwok renews
// a node's lease late (the 2-vCPU machine saturated while the cluster is built) the
// node-lifecycle controller marks the node's pods Ready=False; a real kubelet reports
// its pods' status again once its node is back, but kwok plays a pod's ready stage only
// once, so without this the pods stay unready and their Services' EndpointSlices never
// hold them.
func ReadyAgain(ctx context.Context, cs kubernetes.Interface) (int, error) {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0",
		LabelSelector: PodSelector, FieldSelector: "status.phase=Running"})
	if err != nil {
		return 0, fmt.Errorf("list the simulated pods: %w", err)
	}
	var unready []types.NamespacedName
	for _, p := range list.Items {
		if !k8s.PodReady(&p) && p.DeletionTimestamp == nil {
			unready = append(unready, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	patch, err := readyPatch(time.Now())
	if err != nil {
		return 0, err
	}
	err = parallel.ForEach(ctx, len(unready), Writers, func(ctx context.Context, i int) error {
		p := unready[i]
		_, err := cs.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mark pod %s ready: %w", p, err)
		}
		return nil
	})
	return len(unready), err
}

// readyPatch sets the Ready and ContainersReady conditions (merged by type) to True.
func readyPatch(now time.Time) ([]byte, error) {
	at := metav1.NewTime(now)
	conds := []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
	}
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
}
