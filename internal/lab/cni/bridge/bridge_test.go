package bridge

import (
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func node(name, ip, cidr string) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{PodCIDR: cidr},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

func TestPeerRoutes(t *testing.T) {
	o := labplan.DefaultOptions()
	o.Nodes, o.Underlay = 3, labplan.UnderlayL3
	plan, err := labplan.NewPlan(o, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	nodes := []corev1.Node{
		node("myelin-node-1", "198.18.0.11", "10.244.0.0/24"),
		node("myelin-node-2", "198.18.1.12", "10.244.1.0/24"), // segment B
		node("myelin-node-3", "198.18.0.13", "10.244.2.0/24"),
		node("myelin-node-4", "198.18.0.14", ""), // no PodCIDR yet
	}
	routes, unreachable := peerRoutes(plan.Nodes[0], nodes)
	if len(routes) != 1 || routes[0].dst != netip.MustParsePrefix("10.244.2.0/24") || routes[0].via != netip.MustParseAddr("198.18.0.13") {
		t.Errorf("routes = %+v, want only 10.244.2.0/24 via 198.18.0.13", routes)
	}
	if len(unreachable) != 1 || unreachable[0] != "myelin-node-2" {
		t.Errorf("unreachable = %v, want [myelin-node-2]", unreachable)
	}
}

func TestBridgeConfListLoadsInLibcni(t *testing.T) {
	b, err := confList(netip.MustParsePrefix("10.244.3.0/24"), "/tmp/ipam")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("libcni rejects the bridge conflist: %v", err)
	}
	if list.Name != NetworkName || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "bridge" {
		t.Errorf("conflist = %+v", list)
	}
}
