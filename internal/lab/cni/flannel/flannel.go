package flannel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Version is the Flannel release the lab runs; scripts/build-flannel.sh builds it
// into the tool cache (scripts/versions.sh pins the same version).
const Version = "v0.26.7"

// EtcdPrefix is flanneld's --etcd-prefix (its default): it reads the network
// configuration from <prefix>/config and keeps subnet leases under <prefix>/subnets.
const EtcdPrefix = "/coreos.com/network"

// Names of flannel's pod network on each node, as kube-flannel's conflist and flannel's
// CNI plugin name them. They live inside the node's netns and directory.
const (
	NetworkName = "cbr0"                // CNI network name; host-local leases go under <ipam dir>/cbr0/
	ConfFile    = "10-flannel.conflist" // in the node's CNI configuration directory
	Bridge      = "cni0"                // the bridge the reference plugin creates
	VXLANDevice = "flannel.1"           // the vxlan backend's device (VNI 1)
)

// Flavour runs Flannel: flanneld per node and the reference bridge + host-local
// plugins configured from flanneld's subnet file.
type Flavour struct{}

var _ cni.Flavour = Flavour{}

// Tools are the reference plugins, flanneld, etcdctl (to write the network
// configuration) and iptables (flanneld's masquerading).
func (Flavour) Tools(string) []cni.Tool {
	var tools []cni.Tool
	for _, b := range []string{"bridge", "host-local", "portmap"} {
		tools = append(tools, cni.Tool{Path: filepath.Join(cni.ReferencePluginDir, b), Fix: cni.ReferencePluginFix})
	}
	return append(tools,
		cni.Tool{Path: Binary(), Fix: "build Flannel " + Version + " with: make setup (scripts/build-flannel.sh)"},
		cni.Tool{Path: "etcdctl", Fix: "install etcd-client (make setup)"},
		cni.Tool{Path: "iptables", Fix: "install iptables (make setup)"})
}

// Daemons names flanneld and its backend for `lab up`'s progress line.
func (Flavour) Daemons(p labplan.Plan) string {
	return " with flanneld (" + p.Options.FlannelBackend + ")"
}

// Binary is flanneld as scripts/build-flannel.sh leaves it in the tool cache.
func Binary() string {
	return filepath.Join(cni.ToolCache(), "flannel", Version, "bin", "flannel")
}

// netConfig is flannel's network configuration (pkg/subnet.Config's JSON).
type netConfig struct {
	Network   string
	SubnetLen int
	Backend   struct{ Type string }
}

// NetConfig returns the JSON the lab writes to <EtcdPrefix>/config: the
// lab's cluster CIDR split into per-node subnets of the lab's node CIDR size.
func NetConfig(p labplan.Plan) []byte {
	c := netConfig{Network: p.Addressing.ClusterCIDR.String(), SubnetLen: p.Addressing.NodeCIDRMask}
	c.Backend.Type = p.Options.FlannelBackend
	b, _ := json.Marshal(c) // a struct of strings and ints always marshals
	return b
}

// configCommand is the etcdctl (v3 API) command that stores the network
// configuration where flanneld looks for it, as the lab's etcd client.
func configCommand(p labplan.Plan, paths labplan.Paths) []string {
	etcd := paths.EtcdClientTLS()
	return []string{"etcdctl", "--endpoints", p.Addressing.EtcdURL(),
		"--cacert", etcd.CA, "--cert", etcd.Cert, "--key", etcd.Key, "--command-timeout=10s",
		"put", path.Join(EtcdPrefix, "config"), string(NetConfig(p))}
}

// Processes are the lab's flanneld, one per node inside the node's netns. Each
// talks to the lab's etcd (over TLS, with the etcd client certificate), uses the node's eth0 between nodes, masquerades traffic that
// leaves the pod network (--ip-masq, as kube-flannel runs it) and writes its own subnet
// file. Its iptables rules, routes, devices (flannel.1) and sysctls stay in the node's
// netns.
func (Flavour) Processes(p labplan.Plan, paths labplan.Paths, _ string) []labplan.Process {
	var procs []labplan.Process
	etcd := paths.EtcdClientTLS()
	for _, n := range p.Nodes {
		procs = append(procs, labplan.Process{
			Name: "flanneld-" + n.Name,
			Argv: labplan.InNS(n.Name, Binary(),
				"--etcd-endpoints", p.Addressing.EtcdURL(), "--etcd-prefix", EtcdPrefix,
				"--etcd-cafile", etcd.CA, "--etcd-certfile", etcd.Cert, "--etcd-keyfile", etcd.Key,
				"--iface", "eth0", "--subnet-file", paths.FlannelSubnetFile(n.Name),
				"--ip-masq", "--healthz-port", "0"),
		})
	}
	return procs
}

// Bootstrap stores flannel's network configuration in the lab's etcd (healthy by then,
// and before any flanneld starts). A put overwrites, so a restarted supervisor may run
// it again.
func (Flavour) Bootstrap(ctx context.Context, c cni.Cluster) error {
	argv := configCommand(c.Plan, c.Paths)
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
