package lab

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
)

// Underlay names the topology of the nodes' network.
type Underlay string

const (
	// UnderlayL2 puts every node on segment A (one L2 domain).
	UnderlayL2 Underlay = "l2"
	// UnderlayL3 alternates nodes between segment A and segment B, routed by the lab router.
	UnderlayL3 Underlay = "l3"
)

// Profiles are the named myelin configurations a lab can start with (DESIGN §5).
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
	case CNIBridge, CNIMyelin:
	default:
		return fmt.Errorf("--cni %q: unknown CNI; use one of: %s, %s", o.CNI, CNIMyelin, CNIBridge)
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
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
