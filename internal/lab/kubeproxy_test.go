package lab

import (
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestKubeProxyConfigs: each node's kube-proxy serves health on every address of its
// node (the upstream suite asks localhost:10256 from the node) and proxies for the
// node's own IP.
func TestKubeProxyConfigs(t *testing.T) {
	o := labplan.DefaultOptions()
	o.Nodes, o.KubeProxy = 2, "iptables"
	p, err := labplan.NewPlan(o, labplan.DefaultAddressing())
	if err != nil {
		t.Fatal(err)
	}
	paths := labplan.Paths{Dir: t.TempDir()}
	if err := writeKubeProxyConfigs(paths, p); err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Nodes {
		b, err := os.ReadFile(paths.KubeProxyConfig(n.Name))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"mode: iptables", "bindAddress: " + n.IP.String() + "\n", "healthzBindAddress: 0.0.0.0:10256\n", "hostnameOverride: " + n.Name + "\n"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s's kube-proxy config lacks %q:\n%s", n.Name, want, b)
			}
		}
	}
}
