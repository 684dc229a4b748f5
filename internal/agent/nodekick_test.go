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
