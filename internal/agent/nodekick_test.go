package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/routing"
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

// The slimmed Node gives the node loops the same node (its creation time included:
// the first Node to claim a PodCIDR or IP keeps it), without its images.
func TestSlimNode(t *testing.T) {
	full := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Annotations: map[string]string{"a": "b"},
		CreationTimestamp: metav1.Unix(1_790_000_000, 0)},
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

// The refused and unroutable nodes reach status as "node: reason", and the log names
// each once, not on every resync nor again when another node joins the list.
func TestRouteStatusSet(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	var r routeStatus
	x := routing.Unroutable{Node: "x", Reason: "refused: PodCIDR 10.244.1.128/25 of node x overlaps 10.244.1.0/24 of node n2"}
	y := routing.Unroutable{Node: "y", Reason: "refused: node IP 198.18.0.11 is this node's (n1) own"}
	r.set(2, []routing.Unroutable{x}, log)
	r.set(2, []routing.Unroutable{x}, log)
	var st api.Status
	r.fillStatus(&st)
	if st.Routing.Routes != 2 || len(st.Routing.Unroutable) != 1 || st.Routing.Unroutable[0] != "x: "+x.Reason {
		t.Errorf("status routing %+v, want 2 routes and x with its reason", st.Routing)
	}
	r.set(2, []routing.Unroutable{x, y}, log)
	if nx, ny := strings.Count(logged.String(), "node=x"), strings.Count(logged.String(), "node=y"); nx != 1 || ny != 1 {
		t.Errorf("logged x %d and y %d times, want once each:\n%s", nx, ny, logged.String())
	}
	r.set(3, nil, log)
	if r.fillStatus(&st); len(st.Routing.Unroutable) != 0 || st.Routing.Routes != 3 {
		t.Errorf("after x and y are gone: %+v", st.Routing)
	}
}
