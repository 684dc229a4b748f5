package lab

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestNodePodCIDRs: the control plane's routes to pods follow the Nodes' PodCIDRs,
// except with --cni flannel, where they follow flanneld's leases (its subnet files),
// which differ from the PodCIDRs.
func TestNodePodCIDRs(t *testing.T) {
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "myelin-node-1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "myelin-node-2"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}},
	}
	paths := labplan.Paths{Dir: t.TempDir()}
	file := paths.FlannelSubnetFile("myelin-node-2")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	lease := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.93.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	if err := os.WriteFile(file, []byte(lease), 0o644); err != nil {
		t.Fatal(err)
	}
	for cniName, want := range map[labplan.CNI]map[string]netip.Prefix{
		labplan.CNIMyelin:  {"myelin-node-1": netip.MustParsePrefix("10.244.0.0/24"), "myelin-node-2": netip.MustParsePrefix("10.244.1.0/24")},
		labplan.CNINone:    {"myelin-node-1": netip.MustParsePrefix("10.244.0.0/24"), "myelin-node-2": netip.MustParsePrefix("10.244.1.0/24")},
		labplan.CNIFlannel: {"myelin-node-2": netip.MustParsePrefix("10.244.93.0/24")},
	} {
		o := labplan.DefaultOptions()
		o.CNI, o.Runtime = cniName, labplan.RuntimeContainerd
		p, err := labplan.NewPlan(o, labplan.DefaultAddressing())
		if err != nil {
			t.Fatal(err)
		}
		if got := nodePodCIDRs(p, paths, nodes); !maps.Equal(got, want) {
			t.Errorf("--cni %s: nodePodCIDRs() = %v, want %v", cniName, got, want)
		}
	}
}
