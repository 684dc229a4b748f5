package agent

import (
	corev1 "k8s.io/api/core/v1"
)

// nodeUpdateMatters reports whether a Node update changes what the loops that follow
// Nodes read (clusterNodes: name, InternalIP, PodCIDR). Kubelets (and kwok) update
// their Node's status for heartbeats and conditions; with 1,000 nodes that is several
// updates a second, and each would run every loop over all nodes again for nothing.
// The loops still re-sync every nodeResync.
func nodeUpdateMatters(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return clusterNodes([]*corev1.Node{o})[0] != clusterNodes([]*corev1.Node{n})[0]
}
