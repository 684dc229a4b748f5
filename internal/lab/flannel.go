package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// --cni flannel runs Flannel as its users do, with etcd as its store: the lab writes the
// network configuration to the lab's etcd, one flanneld per node (in the node's netns)
// leases a subnet and programs the backend, and the lab kubelet installs a conflist for
// the reference bridge + host-local plugins from flanneld's subnet file, as flannel's
// own CNI plugin would delegate (the meta-plugin itself isn't needed).

// FlannelVersion is the Flannel release the lab runs; scripts/build-flannel.sh builds it
// into the tool cache (scripts/versions.sh pins the same version).
const FlannelVersion = "v0.26.7"

// FlannelEtcdPrefix is flanneld's --etcd-prefix (its default): it reads the network
// configuration from <prefix>/config and keeps subnet leases under <prefix>/subnets.
const FlannelEtcdPrefix = "/coreos.com/network"

// Names of flannel's pod network on each node, as kube-flannel's conflist and flannel's
// CNI plugin name them. They live inside the node's netns and directory.
const (
	FlannelNetworkName = "cbr0"                // CNI network name; host-local leases go under <ipam dir>/cbr0/
	FlannelConfFile    = "10-flannel.conflist" // in the node's CNI configuration directory
	FlannelBridge      = "cni0"                // the bridge the reference plugin creates
	FlannelVXLANDevice = "flannel.1"           // the vxlan backend's device (VNI 1)
)

// FlannelBinary is flanneld as scripts/build-flannel.sh leaves it in the tool cache.
func FlannelBinary() string {
	return filepath.Join(cacheDir(), "flannel", FlannelVersion, "bin", "flannel")
}

// flannelNetConfig is flannel's network configuration (pkg/subnet.Config's JSON).
type flannelNetConfig struct {
	Network   string
	SubnetLen int
	Backend   struct{ Type string }
}

// FlannelNetConfig returns the JSON the lab writes to <FlannelEtcdPrefix>/config: the
// lab's cluster CIDR split into per-node subnets of the lab's node CIDR size.
func FlannelNetConfig(p labplan.Plan) []byte {
	c := flannelNetConfig{Network: p.Addressing.ClusterCIDR.String(), SubnetLen: p.Addressing.NodeCIDRMask}
	c.Backend.Type = p.Options.FlannelBackend
	b, _ := json.Marshal(c) // a struct of strings and ints always marshals
	return b
}

// flannelEndpoint is the lab's etcd as flanneld and etcdctl reach it.
func flannelEndpoint(p labplan.Plan) string {
	return fmt.Sprintf("http://%s:%d", p.Addressing.ControlPlaneIP(), EtcdClientPort)
}

// flannelConfigCommand is the etcdctl (v3 API) command that stores the network
// configuration where flanneld looks for it.
func flannelConfigCommand(p labplan.Plan) []string {
	return []string{"etcdctl", "--endpoints", flannelEndpoint(p), "--command-timeout=10s",
		"put", path.Join(FlannelEtcdPrefix, "config"), string(FlannelNetConfig(p))}
}

// flannelProcesses are the lab's flanneld, one per node inside the node's netns. Each
// talks to the lab's etcd, uses the node's eth0 between nodes, masquerades traffic that
// leaves the pod network (--ip-masq, as kube-flannel runs it) and writes its own subnet
// file. Its iptables rules, routes, devices (flannel.1) and sysctls stay in the node's
// netns.
func flannelProcesses(p labplan.Plan, paths labplan.Paths) []labplan.Process {
	var procs []labplan.Process
	for _, n := range p.Nodes {
		procs = append(procs, labplan.Process{
			Name: "flanneld-" + n.Name,
			Argv: labplan.InNS(n.Name, FlannelBinary(),
				"--etcd-endpoints", flannelEndpoint(p), "--etcd-prefix", FlannelEtcdPrefix,
				"--iface", "eth0", "--subnet-file", paths.FlannelSubnetFile(n.Name),
				"--ip-masq", "--healthz-port", "0"),
		})
	}
	return procs
}

// writeFlannelNetConfig stores flannel's network configuration in the lab's etcd (once
// etcd is healthy, before any flanneld starts). A put overwrites, so a restarted
// supervisor may run it again.
func writeFlannelNetConfig(ctx context.Context, plan labplan.Plan) error {
	argv := flannelConfigCommand(plan)
	var err error
	for range 10 {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		var out []byte
		if out, err = cmd.CombinedOutput(); err == nil {
			return nil
		}
		err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("write flannel's network configuration to etcd key %s: %w", argv[len(argv)-2], err)
}

// FlannelSubnet is what flanneld writes to its subnet file (subnet.env).
type FlannelSubnet struct {
	Network netip.Prefix // FLANNEL_NETWORK: the whole pod network
	Subnet  netip.Prefix // FLANNEL_SUBNET: this node's lease; the address is the bridge's (gateway)
	MTU     int          // FLANNEL_MTU: the pod MTU the backend leaves room for
	IPMasq  bool         // FLANNEL_IPMASQ: flanneld masquerades, so the bridge must not
}

// ParseFlannelSubnet reads a subnet.env. Lines are KEY=VALUE; unknown keys (IPv6) are
// ignored.
func ParseFlannelSubnet(b []byte) (FlannelSubnet, error) {
	var s FlannelSubnet
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "FLANNEL_NETWORK":
			s.Network, err = netip.ParsePrefix(value)
		case "FLANNEL_SUBNET":
			s.Subnet, err = netip.ParsePrefix(value)
		case "FLANNEL_MTU":
			s.MTU, err = strconv.Atoi(value)
		case "FLANNEL_IPMASQ":
			s.IPMasq, err = strconv.ParseBool(value)
		default:
			continue
		}
		if err != nil {
			return FlannelSubnet{}, fmt.Errorf("flannel subnet file: %s=%q: %w", key, value, err)
		}
		seen[key] = true
	}
	for _, key := range []string{"FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU"} {
		if !seen[key] {
			return FlannelSubnet{}, fmt.Errorf("flannel subnet file: no %s", key)
		}
	}
	return s, nil
}

// FlannelConfList is the node's conflist: what flannel's CNI plugin would delegate to
// with kube-flannel's configuration (delegate hairpinMode and isDefaultGateway, then
// portmap). The bridge cni0 gets the subnet's first address as gateway, host-local
// hands out the rest of the node's subnet (leases under ipamDir, per node) with a route
// to the whole pod network, and the bridge masquerades only when flanneld doesn't.
func FlannelConfList(s FlannelSubnet, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       FlannelNetworkName,
		"plugins": []any{
			map[string]any{
				"type":             "bridge",
				"bridge":           FlannelBridge,
				"isGateway":        true,
				"isDefaultGateway": true,
				"hairpinMode":      true,
				"ipMasq":           !s.IPMasq,
				"mtu":              s.MTU,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": s.Subnet.Masked().String()}}},
					"routes":  []map[string]string{{"dst": s.Network.String()}},
					"dataDir": ipamDir,
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// nodeDaemons names the per-node network daemons the lab starts besides the kubelets,
// for `lab up`'s progress line.
func nodeDaemons(p labplan.Plan) string {
	switch p.Options.CNI {
	case labplan.CNIMyelin:
		return " with myelin-agent"
	case labplan.CNIFlannel:
		return " with flanneld (" + p.Options.FlannelBackend + ")"
	}
	return ""
}
