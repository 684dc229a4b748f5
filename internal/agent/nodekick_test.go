package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeUpdateMatters(t *testing.T) {
	node := func(ip, cidr string, hb int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastHeartbeatTime: metav1.Unix(hb, 0)}}}}
	}
	base := node("198.18.0.12", "10.244.1.0/24", 1)
	for _, c := range []struct {
		name string
		cur  *corev1.Node
		want bool
	}{
		{"heartbeat", node("198.18.0.12", "10.244.1.0/24", 2), false},
		{"new InternalIP", node("198.18.0.13", "10.244.1.0/24", 2), true},
		{"PodCIDR assigned", node("198.18.0.12", "10.244.2.0/24", 1), true},
	} {
		if got := nodeUpdateMatters(base, c.cur); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if !nodeUpdateMatters("tombstone", base) {
		t.Error("an update of an unknown object must count")
	}
}

// The slimmed Node gives the node loops the same node, without its images.
func TestSlimNode(t *testing.T) {
	full := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{"a": "b"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.12"}},
			Images: []corev1.ContainerImage{{Names: []string{"registry/app:1"}, SizeBytes: 1 << 20}}}}
	obj, err := slimNode(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Node)
	if clusterNodes([]*corev1.Node{slim})[0] != clusterNodes([]*corev1.Node{full})[0] {
		t.Errorf("slim node %+v differs for the loops from %+v", clusterNodes([]*corev1.Node{slim}), clusterNodes([]*corev1.Node{full}))
	}
	if slim.Status.Images != nil || slim.Annotations != nil {
		t.Errorf("slim node keeps what no loop reads: %+v", slim)
	}
}
