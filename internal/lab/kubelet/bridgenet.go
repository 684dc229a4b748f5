package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// BridgeNetworkName is the CNI network name of the lab's --cni bridge mode; host-local
// keeps its leases under <ipam dir>/<BridgeNetworkName>/<ip>.
const BridgeNetworkName = "myelin-bridge"

// bridgeConfFile is the conflist the bridge network installs in the node's CNI dir.
const bridgeConfFile = "10-myelin-bridge.conflist"

// bridgeConfList is the CNI configuration for Debian's reference plugins: a Linux
// bridge per node with host-local addresses from the node's PodCIDR.
func bridgeConfList(podCIDR netip.Prefix, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       BridgeNetworkName,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      "myelin-br",
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": podCIDR.String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": ipamDir,
			},
		}},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// peerRoute is a static route to another node's PodCIDR via that node's IP.
type peerRoute struct {
	dst netip.Prefix
	via netip.Addr
}

// peerRoutes computes the routes this node needs for --cni bridge: one per other node
// on the same underlay segment (a static route can't cross the router, which knows no
// PodCIDRs).
func peerRoutes(self labplan.Node, nodes []corev1.Node) (routes []peerRoute, unreachable []string) {
	for _, n := range nodes {
		if n.Name == self.Name || n.Spec.PodCIDR == "" {
			continue
		}
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			continue
		}
		ip := k8s.NodeInternalIP(&n)
		if !ip.IsValid() {
			continue
		}
		if !self.Segment.Contains(ip) {
			unreachable = append(unreachable, n.Name)
			continue
		}
		routes = append(routes, peerRoute{dst: cidr, via: ip})
	}
	return routes, unreachable
}

// runBridgeNetwork stands in for a network DaemonSet in --cni bridge mode: it installs
// the bridge conflist once the node has a PodCIDR and keeps static routes to the other
// nodes' PodCIDRs. It uses its own (admin) identity, as a DaemonSet has its own
// ServiceAccount; the node identity may not list other Nodes.
func runBridgeNetwork(ctx context.Context, cfg Config, cs kubernetes.Interface, log *slog.Logger) {
	installed := map[netip.Prefix]netip.Addr{}
	for {
		if err := syncBridgeNetwork(ctx, cfg, cs, installed, log); err != nil {
			log.Error("sync bridge network", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func syncBridgeNetwork(ctx context.Context, cfg Config, cs kubernetes.Interface, installed map[netip.Prefix]netip.Addr, log *slog.Logger) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if n.Name != cfg.Node.Name || n.Spec.PodCIDR == "" {
			continue
		}
		if err := installBridgeConf(cfg, n.Spec.PodCIDR); err != nil {
			return err
		}
	}
	routes, unreachable := peerRoutes(cfg.Node, nodes.Items)
	if len(unreachable) > 0 {
		log.Warn("no static route to nodes on another underlay segment", "nodes", unreachable)
	}
	want := map[netip.Prefix]netip.Addr{}
	for _, r := range routes {
		want[r.dst] = r.via
		if installed[r.dst] == r.via {
			continue
		}
		if err := runCmd("ip", "route", "replace", r.dst.String(), "via", r.via.String()); err != nil {
			return err
		}
		installed[r.dst] = r.via
		log.Info("route installed", "dst", r.dst, "via", r.via)
	}
	for dst := range installed {
		if _, ok := want[dst]; !ok {
			if err := runCmd("ip", "route", "del", dst.String()); err != nil {
				log.Warn("remove route", "dst", dst, "err", err)
			}
			delete(installed, dst)
		}
	}
	return nil
}

func installBridgeConf(cfg Config, podCIDR string) error {
	cidr, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return fmt.Errorf("node %s has a bad PodCIDR %q: %w", cfg.Node.Name, podCIDR, err)
	}
	b, err := bridgeConfList(cidr, cfg.Paths.IPAMDir(cfg.Node.Name))
	if err != nil {
		return err
	}
	path := filepath.Join(cfg.cniConfDir(), bridgeConfFile)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	if err := os.MkdirAll(cfg.cniConfDir(), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
