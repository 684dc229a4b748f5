package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// NetworkName is the CNI network name of the lab's --cni bridge mode; host-local
// keeps its leases under <ipam dir>/<NetworkName>/<ip>.
const NetworkName = "myelin-bridge"

// confFile is the conflist the bridge network installs in the node's CNI dir.
const confFile = "10-myelin-bridge.conflist"

// Flavour runs Debian's reference bridge + host-local plugins with static routes
// between nodes: the lab without myelin, and the baseline peer stack.
type Flavour struct{}

var _ cni.Flavour = Flavour{}

// Tools are the reference bridge and host-local plugins.
func (Flavour) Tools(string) []cni.Tool {
	var tools []cni.Tool
	for _, b := range []string{"bridge", "host-local"} {
		tools = append(tools, cni.Tool{Path: filepath.Join(cni.ReferencePluginDir, b), Fix: cni.ReferencePluginFix})
	}
	return tools
}

// Processes are none: the lab kubelets install the configuration and routes.
func (Flavour) Processes(labplan.Plan, labplan.Paths, string) []labplan.Process { return nil }

// Daemons are none.
func (Flavour) Daemons(labplan.Plan) string { return "" }

// Bootstrap has nothing to create.
func (Flavour) Bootstrap(context.Context, cni.Cluster) error { return nil }

// confList is the CNI configuration for Debian's reference plugins: a Linux
// bridge per node with host-local addresses from the node's PodCIDR.
func confList(podCIDR netip.Prefix, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
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

// NodeNetwork stands in for a network DaemonSet in --cni bridge mode: it installs
// the bridge conflist once the node has a PodCIDR and keeps static routes to the other
// nodes' PodCIDRs. It uses the admin identity, as a DaemonSet has its own
// ServiceAccount; the node identity may not list other Nodes.
func (Flavour) NodeNetwork(ctx context.Context, n cni.Node) {
	installed := map[netip.Prefix]netip.Addr{}
	for {
		if err := syncNetwork(ctx, n, installed); err != nil {
			n.Log.Error("sync bridge network", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func syncNetwork(ctx context.Context, cfg cni.Node, installed map[netip.Prefix]netip.Addr) error {
	log := cfg.Log
	nodes, err := cfg.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if n.Name != cfg.Node.Name || n.Spec.PodCIDR == "" {
			continue
		}
		if err := installConf(cfg, n.Spec.PodCIDR); err != nil {
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

func installConf(cfg cni.Node, podCIDR string) error {
	cidr, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return fmt.Errorf("node %s has a bad PodCIDR %q: %w", cfg.Node.Name, podCIDR, err)
	}
	b, err := confList(cidr, cfg.Paths.IPAMDir(cfg.Node.Name))
	if err != nil {
		return err
	}
	_, err = cni.InstallConfList(cfg.Paths.CNIConfDir(cfg.Node.Name), confFile, b)
	return err
}

// runCmd runs a command in the node's netns (the kubelet's own) and returns its output
// in the error when it fails.
func runCmd(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %s", strings.Join(argv, " "), strings.TrimSpace(string(out)+" "+err.Error()))
	}
	return nil
}
