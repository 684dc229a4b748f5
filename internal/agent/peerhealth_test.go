package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/routing"
)

// Node health probes the other nodes but those routing.Peers refuses: a Node claiming
// half of another's PodCIDR would have that node's health address answer for it.
func TestPeerHealthSkipsLyingNodes(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	node := func(name, ip, cidr string, created int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(created, 0)},
			Spec:   corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	for _, n := range []*corev1.Node{
		node("n1", "198.18.0.11", "10.244.0.0/24", 1),
		node("n2", "198.18.0.12", "10.244.1.0/24", 2),
		node("n3", "198.18.0.13", "", 3), // no PodCIDR yet: probed on its node IP
		node("liar", "198.18.0.250", "10.244.1.0/25", time.Now().Unix()),
	} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	h := &peerHealthLoop{node: "n1", nodes: &nodeWatch{lister: corelisters.NewNodeLister(idx)},
		local: routing.Local{Name: "n1", IP: netip.MustParseAddr("198.18.0.11"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24"),
			ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}}
	var names []string
	for _, p := range h.peers() {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"n2", "n3"}) {
		t.Errorf("probed %v, want n2 and n3 (not the Node claiming half of n2's PodCIDR)", names)
	}
}
