package labplan

import (
	"fmt"
	"strings"
)

// CNI names the network plugin the lab kubelets call.
type CNI string

const (
	// CNIMyelin runs myelin-agent on every node and calls the myelin-cni plugin.
	CNIMyelin CNI = "myelin"
	// CNIBridge runs Debian's reference bridge + host-local plugins with static routes
	// between nodes: the lab without myelin, and the baseline peer stack.
	CNIBridge CNI = "bridge"
	// CNIFlannel runs Flannel (flanneld with etcd as its store) on every node, with the
	// reference bridge + host-local plugins configured from flannel's subnet file: the
	// peer stack most clusters would run instead of myelin.
	CNIFlannel CNI = "flannel"
)

// Flannel backends the lab can run (--flannel-backend).
const (
	FlannelVXLAN  = "vxlan"   // VXLAN between nodes (flannel.1, UDP 8472); any underlay
	FlannelHostGW = "host-gw" // routes to other nodes' subnets via their IPs; one L2 segment only
)

// FlannelBackends are the allowed values of --flannel-backend; the first is the default.
var FlannelBackends = []string{FlannelVXLAN, FlannelHostGW}

// Underlay names the topology of the nodes' network.
type Underlay string

const (
	// UnderlayL2 puts every node on segment A (one L2 domain).
	UnderlayL2 Underlay = "l2"
	// UnderlayL3 alternates nodes between segment A and segment B, routed by the lab router.
	UnderlayL3 Underlay = "l3"
)

// Profiles are the named myelin configurations a lab can start with (ConfigMap values in ProfileConfig; keys in docs/operations.md).
var Profiles = []string{"native", "native-legacy", "tunnel", "tunnel-legacy"}

// KubeProxyModes are the kube-proxy modes a lab can run (--kube-proxy); "" runs none
// and leaves Services to myelin (kube-proxy-replacement).
var KubeProxyModes = []string{"iptables", "nftables"}

// MaxNodes bounds --nodes: each node is a namespace with its own kubelet process.
const MaxNodes = 16

// Options are what a user chooses for `myelin lab up`.
type Options struct {
	Nodes    int
	CNI      CNI
	Profile  string
	Underlay Underlay
	// KubeProxy runs kube-proxy in this mode on every node and sets
	// kube-proxy-replacement to false; "" runs none.
	KubeProxy string
	// FlannelBackend is flannel's backend with --cni flannel ("" = vxlan); it must be
	// empty with any other CNI.
	FlannelBackend string
}

// DefaultOptions are the lab's defaults.
func DefaultOptions() Options {
	return Options{Nodes: 2, CNI: CNIMyelin, Profile: "native", Underlay: UnderlayL2}
}

// Validate reports the first bad option with what is allowed.
func (o Options) Validate() error {
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("--nodes %d: must be between 1 and %d", o.Nodes, MaxNodes)
	}
	switch o.CNI {
	case CNIBridge, CNIMyelin, CNIFlannel:
	default:
		return fmt.Errorf("--cni %q: unknown CNI; use one of: %s, %s, %s", o.CNI, CNIMyelin, CNIBridge, CNIFlannel)
	}
	if !contains(Profiles, o.Profile) {
		return fmt.Errorf("--profile %q: unknown profile; use one of: %s", o.Profile, strings.Join(Profiles, ", "))
	}
	switch o.Underlay {
	case UnderlayL2, UnderlayL3:
	default:
		return fmt.Errorf("--underlay %q: unknown underlay; use %s or %s", o.Underlay, UnderlayL2, UnderlayL3)
	}
	if o.KubeProxy != "" && !contains(KubeProxyModes, o.KubeProxy) {
		return fmt.Errorf("--kube-proxy %q: unknown mode; use one of: %s (or leave it empty to let myelin serve Services)", o.KubeProxy, strings.Join(KubeProxyModes, ", "))
	}
	return o.validateFlannel()
}

func (o Options) validateFlannel() error {
	if o.FlannelBackend == "" {
		return nil
	}
	if o.CNI != CNIFlannel {
		return fmt.Errorf("--flannel-backend %s: only valid with --cni flannel (this lab has --cni %s); drop it or add --cni flannel", o.FlannelBackend, o.CNI)
	}
	if !contains(FlannelBackends, o.FlannelBackend) {
		return fmt.Errorf("--flannel-backend %q: unknown backend; use one of: %s", o.FlannelBackend, strings.Join(FlannelBackends, ", "))
	}
	if o.FlannelBackend == FlannelHostGW && o.Underlay != UnderlayL2 {
		return fmt.Errorf("--flannel-backend host-gw needs every node on one L2 segment, and --underlay %s puts them on two; use --underlay l2 or --flannel-backend vxlan", o.Underlay)
	}
	return nil
}

// withDefaults fills in the options whose default depends on others.
func (o Options) withDefaults() Options {
	if o.CNI == CNIFlannel && o.FlannelBackend == "" {
		o.FlannelBackend = FlannelBackends[0]
	}
	return o
}

// Describe names the lab's CNI as the flags that chose it, e.g.
// "--cni flannel --flannel-backend vxlan".
func (o Options) Describe() string {
	switch o.CNI {
	case CNIMyelin:
		return fmt.Sprintf("--cni %s --profile %s", o.CNI, o.Profile)
	case CNIFlannel:
		return fmt.Sprintf("--cni %s --flannel-backend %s", o.CNI, o.FlannelBackend)
	}
	return fmt.Sprintf("--cni %s", o.CNI)
}

// Flags spells out every option as the `lab up` flags that choose it, e.g.
// "--nodes 2 --cni myelin --profile native --underlay l2".
func (o Options) Flags() string {
	flags := fmt.Sprintf("--nodes %d %s --underlay %s", o.Nodes, o.Describe(), o.Underlay)
	if o.KubeProxy != "" {
		flags += " --kube-proxy " + o.KubeProxy
	}
	return flags
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
