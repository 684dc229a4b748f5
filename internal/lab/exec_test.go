package lab

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// lab exec runs in a pod's own namespace, or a hostNetwork pod's node's when that is a
// node of the lab; a pod bound to any other name (another tool's namespace on the
// machine) is refused, naming it.
func TestPodNetNSOnlyLabNamespaces(t *testing.T) {
	o := labplan.DefaultOptions()
	o.Nodes = 2
	plan, err := labplan.NewPlan(o, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	pod := func(host bool, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "6f1c2a9e-0b7d-4e55-9a51-3c1f0d2e8b47"},
			Spec: corev1.PodSpec{HostNetwork: host, NodeName: node}}
	}
	if ns, err := podNetNS(plan, pod(false, "vpn")); err != nil || ns != labplan.PodNetNS("6f1c2a9e-0b7d-4e55-9a51-3c1f0d2e8b47") {
		t.Errorf("a pod's own namespace: %q, %v; want %q", ns, err, labplan.PodNetNS("6f1c2a9e-0b7d-4e55-9a51-3c1f0d2e8b47"))
	}
	node := labplan.NodeName(2)
	if ns, err := podNetNS(plan, pod(true, node)); err != nil || ns != node {
		t.Errorf("hostNetwork pod on %s: %q, %v; want the node's namespace", node, ns, err)
	}
	for _, name := range []string{"vpn", labplan.NodeName(3), "", "../x"} {
		ns, err := podNetNS(plan, pod(true, name))
		if err == nil || !strings.Contains(err.Error(), "not a node of this lab") {
			t.Errorf("hostNetwork pod on %q: namespace %q, error %v; want a refusal", name, ns, err)
		}
	}
}
