package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/config"
)

// A node's PodCIDR must lie inside cluster-cidr; the error names both, where
// cluster-cidr was set and what to do.
func TestCheckPodCIDR(t *testing.T) {
	c, err := config.Resolve(config.Source{Name: "ConfigMap kube-system/myelin-config", Values: map[string]string{"cluster-cidr": "10.244.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		podCIDR string
		ok      bool
	}{
		{"10.244.3.0/24", true},
		{"10.244.0.0/16", true},
		{"10.245.0.0/24", false},  // beside it
		{"10.0.0.0/8", false},     // around it
		{"192.168.1.0/24", false}, // elsewhere
	} {
		err := checkPodCIDR("node-1", netip.MustParsePrefix(tt.podCIDR), c)
		if tt.ok {
			if err != nil {
				t.Errorf("PodCIDR %s: %v, want no error", tt.podCIDR, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("PodCIDR %s, not inside cluster-cidr 10.244.0.0/16: no error, want one", tt.podCIDR)
			continue
		}
		for _, want := range []string{"node-1", tt.podCIDR, "cluster-cidr 10.244.0.0/16", "ConfigMap kube-system/myelin-config", "--cluster-cidr"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("PodCIDR %s: error %q does not name %q", tt.podCIDR, err, want)
			}
		}
	}
}
