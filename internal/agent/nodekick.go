package agent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeUpdateMatters reports whether a Node update changes what the loops that follow
// Nodes read (clusterNodes: name, InternalIP, PodCIDR, creation time). Kubelets (and
// kwok) update their Node's status for heartbeats and conditions; with 1,000 nodes
// that is several updates a second, and each would run every loop over all nodes
// again for nothing. The loops still re-sync every nodeResync.
func nodeUpdateMatters(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return clusterNodes([]*corev1.Node{o})[0] != clusterNodes([]*corev1.Node{n})[0]
}

// slimNode is the transform of the agent's Node informer: it keeps only what the loops
// that follow Nodes read (name, creation time, PodCIDRs, addresses) and drops the rest
// before the cache stores the Node: a real node's status lists its images (tens of
// KB), conditions, capacity and node info, which with 5,000 nodes would be most of the
// agent's memory. Other objects (tombstones) pass unchanged.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp},
		Spec:   corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status: corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}
