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
	// CNINone installs no CNI at all (--runtime containerd only): the nodes register
	// and stay NotReady until a CNI is installed, e.g. by the Helm chart.
	CNINone CNI = "none"
)

// Runtime names what runs a lab node's pods.
type Runtime string

const (
	// RuntimeLab is the lab kubelet (internal/lab/kubelet): pods are host processes in
	// their own netns; fast, the default for the datapath tests and benches.
	RuntimeLab Runtime = "lab"
	// RuntimeContainerd is the real kubelet with containerd + runc: pods are containers
	// from the locally built images (internal/images).
	RuntimeContainerd Runtime = "containerd"
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
	// Runtime runs the nodes' pods ("" = lab).
	Runtime Runtime `json:",omitempty"`
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
	case CNIBridge, CNIMyelin, CNIFlannel, CNINone:
	default:
		return fmt.Errorf("--cni %q: unknown CNI; use one of: %s, %s, %s, %s", o.CNI, CNIMyelin, CNIBridge, CNIFlannel, CNINone)
	}
	if err := o.validateRuntime(); err != nil {
		return err
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

func (o Options) validateRuntime() error {
	switch o.Runtime {
	case "", RuntimeLab:
		if o.CNI == CNINone {
			return fmt.Errorf("--cni none: only valid with --runtime containerd (the lab kubelet needs a CNI to run pods); add --runtime containerd or pick a CNI")
		}
	case RuntimeContainerd:
		if o.Underlay != UnderlayL2 {
			return fmt.Errorf("--runtime containerd --underlay %s: the apiserver reaches the kubelets (exec, logs) only on segment A; use --underlay l2", o.Underlay)
		}
	default:
		return fmt.Errorf("--runtime %q: unknown runtime; use %s (the lab kubelet, the default) or %s (kubelet %s with containerd)", o.Runtime, RuntimeLab, RuntimeContainerd, "v1.34.4")
	}
	return nil
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
	if o.Runtime == "" {
		o.Runtime = RuntimeLab
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
// "--nodes 2 --cni myelin --profile native --underlay l2 --runtime lab".
func (o Options) Flags() string {
	flags := fmt.Sprintf("--nodes %d %s --underlay %s", o.Nodes, o.Describe(), o.Underlay)
	if o.KubeProxy != "" {
		flags += " --kube-proxy " + o.KubeProxy
	}
	return flags + " --runtime " + string(o.RuntimeName())
}

// RuntimeName is the runtime, "lab" when unset.
func (o Options) RuntimeName() Runtime {
	if o.Runtime == "" {
		return RuntimeLab
	}
	return o.Runtime
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
