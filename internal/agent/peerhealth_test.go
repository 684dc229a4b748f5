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

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/routing"
)

// Node health probes the other nodes but those routing.Peers refuses: a Node claiming
// half of another's PodCIDR would have that node's health address answer for it.
func TestPeerHealthSkipsLyingNodes(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range []*corev1.Node{
		testNode("n1", "198.18.0.11", "10.244.0.0/24", 1),
		testNode("n2", "198.18.0.12", "10.244.1.0/24", 2),
		testNode("n3", "198.18.0.13", "", 3), // no PodCIDR yet: probed on its node IP
		testNode("liar", "198.18.0.250", "10.244.1.0/25", time.Now().Unix()),
	} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	w := &nodeWatch{lister: corelisters.NewNodeLister(idx)}
	local := routing.Local{Name: "n1", IP: netip.MustParseAddr("198.18.0.11"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24"),
		ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")}
	h := &peerHealthLoop{node: "n1", nodes: w, local: local,
		known: newNodesDerived(w, func(ns []*corev1.Node) []clusterhealth.Peer { return healthPeers("n1", local, ns) })}
	probed := func() []string {
		var names []string
		for _, p := range h.peers() {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		return names
	}
	if got := probed(); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Errorf("probed %v, want n2 and n3 (not the Node claiming half of n2's PodCIDR)", got)
	}

	// The peers are kept between rounds: a Node the informer has but the watch has
	// not announced yet is not probed.
	if err := idx.Add(testNode("n5", "198.18.0.15", "10.244.4.0/24", 5)); err != nil {
		t.Fatal(err)
	}
	if got := probed(); !slices.Equal(got, []string{"n2", "n3"}) {
		t.Errorf("before the watch said anything changed, probed %v, want the kept n2 and n3", got)
	}

	// They are computed again after a change: n3 got its PodCIDR, the liar and n5
	// left, n4 joined.
	if err := idx.Delete(testNode("n5", "", "", 0)); err != nil {
		t.Fatal(err)
	}
	if err := idx.Update(testNode("n3", "198.18.0.13", "10.244.2.0/24", 3)); err != nil {
		t.Fatal(err)
	}
	if err := idx.Delete(testNode("liar", "", "", 0)); err != nil {
		t.Fatal(err)
	}
	if err := idx.Add(testNode("n4", "198.18.0.14", "10.244.3.0/24", 4)); err != nil {
		t.Fatal(err)
	}
	w.kick()
	if got := probed(); !slices.Equal(got, []string{"n2", "n3", "n4"}) {
		t.Errorf("after the Nodes changed, probed %v, want n2, n3 and n4", got)
	}
	for _, p := range h.peers() {
		if p.Name == "n3" && p.HealthIP != netip.MustParseAddr("10.244.2.1") {
			t.Errorf("n3's health address %v after it got 10.244.2.0/24", p.HealthIP)
		}
	}
	// With every other Node gone, no peers is an answer too (not "compute again").
	for _, n := range []string{"n2", "n3", "n4"} {
		if err := idx.Delete(testNode(n, "", "", 0)); err != nil {
			t.Fatal(err)
		}
	}
	w.kick()
	if got := probed(); len(got) != 0 {
		t.Errorf("with no other Node, probed %v", got)
	}
}

// testNode is a Node as the agent's Node informer keeps it: name, creation time (Unix
// seconds), PodCIDR and InternalIP.
func testNode(name, ip, cidr string, created int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(created, 0)},
		Spec:   corev1.NodeSpec{PodCIDR: cidr},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}
