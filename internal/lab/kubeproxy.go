package lab

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// KubeProxyUser is kube-proxy's identity in the lab (its certificate's file name);
// the certificate's CN is system:kube-proxy, which Kubernetes' bootstrap RBAC binds
// to the system:node-proxier ClusterRole.
const KubeProxyUser = "kube-proxy"

// writeKubeProxyConfigs writes each node's KubeProxyConfiguration when the lab runs
// kube-proxy. kube-proxy runs inside the node's netns, so its iptables or nftables
// rules, its health and metrics ports and its per-netns sysctls stay in the node.
// The conntrack settings are 0 so it leaves the host-wide conntrack sysctls alone,
// and localhostNodePorts is off so it doesn't set route_localnet. Health is served on
// every address of the node (kube-proxy's default, 0.0.0.0:10256): load balancers probe
// the node IP, and the upstream suite's "should check kube-proxy urls" asks localhost
// from the node (it failed while health was bound to the node IP only).
func writeKubeProxyConfigs(paths labplan.Paths, plan labplan.Plan) error {
	if plan.Options.KubeProxy == "" {
		return nil
	}
	for _, n := range plan.Nodes {
		conf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: %s
clusterCIDR: %s
bindAddress: %s
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, paths.ComponentKubeconfig(KubeProxyUser), n.Name, plan.Options.KubeProxy,
			plan.Addressing.ClusterCIDR, n.IP)
		path := paths.KubeProxyConfig(n.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return err
		}
	}
	return nil
}
