package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/lab"
)

// heartbeatInterval is how often the node's Ready condition and Lease are renewed;
// well inside the node lifecycle controller's grace period (50 s).
const heartbeatInterval = 10 * time.Second

// registerNode creates this node's Node object, or refreshes its labels and addresses.
func (k *Kubelet) registerNode(ctx context.Context) error {
	n := k.cfg.Node
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname": n.Name,
				"kubernetes.io/os":       runtime.GOOS,
				"kubernetes.io/arch":     runtime.GOARCH,
				"myelin.io/lab-node":     fmt.Sprint(n.Index),
			},
		},
	}
	var err error
	for attempt := 0; attempt < 60; attempt++ {
		_, err = k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return k.patchNodeStatus(ctx)
		}
		k.log.Info("waiting for the apiserver to register the node", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("register node %s: %w", n.Name, err)
}

// heartbeat keeps the Node's Ready condition and its Lease fresh.
func (k *Kubelet) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	for {
		if err := k.patchNodeStatus(ctx); err != nil {
			k.log.Error("update node status", "err", err)
		}
		if err := k.renewLease(ctx); err != nil {
			k.log.Error("renew node lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// patchNodeStatus reports addresses, capacity and Ready. The node is Ready once a CNI
// configuration is installed, as with a real kubelet and container runtime.
func (k *Kubelet) patchNodeStatus(ctx context.Context) error {
	now := metav1.Now()
	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "lab kubelet is posting ready status",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	if _, err := k.cni.config(); err != nil {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "NetworkPluginNotReady", err.Error()
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(fmt.Sprint(runtime.NumCPU())),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	status := corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: k.cfg.Node.IP.String()},
			{Type: corev1.NodeHostName, Address: k.cfg.Node.Name},
		},
		Conditions: []corev1.NodeCondition{ready},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          lab.KubeVersion,
			OperatingSystem:         runtime.GOOS,
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "myelin-lab://" + lab.KubeVersion,
		},
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = k.cs.CoreV1().Nodes().PatchStatus(ctx, k.cfg.Node.Name, patch)
	return err
}

func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, k.cfg.Node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Node.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.cfg.Node.Name),
				LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
