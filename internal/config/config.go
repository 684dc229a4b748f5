package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/myelin-net/myelin/internal/memlimit"
)

// RoutingMode is how pod traffic crosses between nodes.
type RoutingMode string

const (
	RoutingNative RoutingMode = "native"
	RoutingTunnel RoutingMode = "tunnel"
)

// HostRouting is how packets are delivered on a node.
type HostRouting string

const (
	HostRoutingAuto   HostRouting = "auto"
	HostRoutingBPF    HostRouting = "bpf"
	HostRoutingLegacy HostRouting = "legacy"
)

// PodSourceFromHosts is pod-source-from-hosts: what happens to a packet that another
// host (the uplink, a second network) sends from this node's PodCIDR.
type PodSourceFromHosts string

const (
	// PodSourceFromHostsAuto drops it where no legitimate packet can look like that:
	// source validation and masquerade on, no no-masquerade CIDR beyond cluster-cidr.
	PodSourceFromHostsAuto  PodSourceFromHosts = "auto"
	PodSourceFromHostsDrop  PodSourceFromHosts = "drop"  // drop it whatever the other keys say
	PodSourceFromHostsAllow PodSourceFromHosts = "allow" // never drop it
)

// TunnelPodToNode is tunnel-pod-to-node: how, in tunnel mode, pods reach the
// InternalIPs of other nodes (docs/datapath.md, "Pods to other nodes").
type TunnelPodToNode string

const (
	// TunnelPodToNodePlain sends them plain, as routed; a plain packet from a pod
	// address to this node's IP is then what a pod of another node sends.
	TunnelPodToNodePlain TunnelPodToNode = "plain"
	// TunnelPodToNodeEncapsulate sends them through the overlay, and counts the
	// plain ones that still arrive here (nodes not encapsulating yet).
	TunnelPodToNodeEncapsulate TunnelPodToNode = "encapsulate"
	// TunnelPodToNodeEnforce encapsulates too, and drops as forged a plain packet
	// from a pod address to this node's IP, and one from a pod of another node that
	// anything but the overlay brings into a pod. Once every node encapsulates.
	TunnelPodToNodeEnforce TunnelPodToNode = "enforce"
)

// LB algorithms (lb-algorithm): how a Service's backend is picked for a new flow.
const (
	LBRandom = "random"
	LBMaglev = "maglev"
)

// Guard is what the agent does when it finds user-defined iptables rules.
type Guard string

const (
	GuardRefuse Guard = "refuse"
	GuardWarn   Guard = "warn"
	GuardOff    Guard = "off"
)

// Config is the validated, effective configuration of one node's agent. It is built
// once at start and passed by value; nothing changes it afterwards.
type Config struct {
	ClusterCIDR    netip.Prefix
	RoutingMode    RoutingMode
	TunnelProtocol string
	TunnelPort     uint16
	// EnableBPFTunnel is enable-bpf-tunnel: with tunnel mode and BPF host routing,
	// the BPF programs encapsulate and decapsulate VXLAN themselves where they can;
	// false leaves all of it to myelin_vxlan (wire-compatible either way).
	EnableBPFTunnel       bool
	AutoDirectNodeRoutes  bool
	IPv4NativeRoutingCIDR netip.Prefix // invalid (zero) when unset
	HostRouting           HostRouting
	EnableIPv4Masquerade  bool
	EnableBPFMasquerade   bool
	NonMasqueradeCIDRs    []netip.Prefix
	UserIPTablesGuard     Guard
	KubeProxyReplacement  bool
	LBAlgorithm           string
	// BPFLBSock is bpf-lb-sock: Services are also translated at connect() and
	// sendmsg() by cgroup programs (socket-level load balancing) attached to
	// CgroupRoot (cgroup-root; "" is the cgroup2 mount). Needs KubeProxyReplacement.
	BPFLBSock  bool
	CgroupRoot string
	// KubeProxyHealthzAddr and KubeProxyMetricsAddr are where the agent answers, with
	// kube-proxy-replacement, what kube-proxy serves on its healthz and metrics
	// addresses (kube-proxy-replacement-healthz-bind-address,
	// kube-proxy-replacement-metrics-bind-address; "": not served).
	KubeProxyHealthzAddr string
	KubeProxyMetricsAddr string
	MaglevTableSize      int
	MTU                  int // 0 = detect from the uplink
	// EnableSourceIPVerification: pods may send only from their own IPv4 address
	// and MAC, the node not from a pod's (enable-source-ip-verification). Off
	// only to measure its cost.
	EnableSourceIPVerification bool
	// PodSourceFromHosts decides whether this node drops, as spoofed, packets from
	// its PodCIDR that other hosts send (pod-source-from-hosts).
	PodSourceFromHosts PodSourceFromHosts
	// TunnelPodToNode is tunnel-pod-to-node (tunnel mode).
	TunnelPodToNode TunnelPodToNode
	// EnableIPv4BIGTCP: pod devices, the uplink and the overlay device carry IPv4
	// GSO/GRO packets up to 192 KiB when the node's devices can (enable-ipv4-big-tcp).
	EnableIPv4BIGTCP bool
	// EnableHubble: the datapath reports flows and the agent keeps them for
	// `myelin observe` and the Hubble API (enable-hubble); off costs nothing per packet.
	EnableHubble bool
	// HubbleEventBufferCapacity is how many flows the agent keeps (hubble-event-buffer-capacity).
	HubbleEventBufferCapacity int
	// HubbleListenAddress is where the agent serves the Hubble Observer API over TCP for
	// the relay (hubble-listen-address, "[ip]:port"; "" serves only the local socket).
	HubbleListenAddress string
	// HubbleTLSCertFile and HubbleTLSKeyFile (hubble-tls-cert-file, hubble-tls-key-file)
	// turn on TLS for HubbleListenAddress (not the local socket); with
	// HubbleTLSClientCAFiles (hubble-tls-client-ca-files) only clients with a
	// certificate those CAs signed may connect, and with HubbleTLSClientNames
	// (hubble-tls-client-names) only those whose certificate carries one of these names
	// (the relay's; empty: any the CAs signed).
	HubbleTLSCertFile, HubbleTLSKeyFile string
	HubbleTLSClientCAFiles              []string
	HubbleTLSClientNames                []string
	// NATPortRange is nat-port-range: the ports masquerade and NodePort SNAT
	// translate to; zero means auto (above the node's ephemeral ports).
	NATPortRange PortRange
	// NodePortNATSynMax, NodePortNATMax and NodePortNATUDPMax size the
	// NodePort SNAT tables (nodeport-nat-syn-max, nodeport-nat-max,
	// nodeport-nat-udp-max), in entries, two per flow.
	NodePortNATSynMax int
	NodePortNATMax    int
	NodePortNATUDPMax int
	// PolicyCTMax sizes the NetworkPolicy connection table (policy-ct-max), one
	// slot per tracked connection, in buckets of four.
	PolicyCTMax int
	// PolicyCTPodMax is policy-ct-pod-max: the most of those entries one pod may
	// hold (an entry counts against the pod that opened the connection when a
	// node validated its source, else against the local pods that accepted it;
	// docs/policy.md) before its new connections
	// are dropped (DROP_POLICY_CT_BUDGET); 0 is no budget, PodMaxAuto a quarter
	// of PolicyCTMax (PolicyCTPodBudget).
	PolicyCTPodMax int
	// NATPodMax is nat-pod-max: the most masqueraded flows one pod may hold before
	// its new flows out of the cluster are dropped (DROP_NAT_BUDGET); 0 is no
	// budget, PodMaxAuto a quarter of the node's table (NATPodBudget).
	NATPodMax int
	// LBCTPodMax is lb-ct-pod-max: the most load-balanced flows one pod may hold in
	// the Service conntrack table before its new Service flows are dropped
	// (DROP_SVC_CT_BUDGET); 0 is no budget, PodMaxAuto a quarter of the table
	// (LBCTPodBudget).
	LBCTPodMax int
	// PrometheusServeAddr is where the agent serves its myelin_ metrics
	// (prometheus-serve-addr); "" turns them off.
	PrometheusServeAddr string
	// HubbleMetricsServer is where the agent serves the flow metrics
	// (hubble-metrics-server); "" turns them off. HubbleMetrics are the families
	// served (hubble-metrics).
	HubbleMetricsServer string
	HubbleMetrics       []string
	// ClusterHealthPort is cluster-health-port: where every agent answers the other
	// agents' health probes (internal/clusterhealth); 0 turns probing off.
	ClusterHealthPort int
	// MemoryLimit is memory-limit: the agent's soft memory limit (GOMEMLIMIT),
	// applied by internal/memlimit.
	MemoryLimit memlimit.Setting

	// Effective lists every key with its value and the source it came from.
	Effective []Effective
	// Sources names the sources applied over the defaults, in order.
	Sources []string
	// SourceUIDs maps a source's name to its object's UID where it has one (the
	// NodeConfigs): an Event's involvedObject needs it to show in kubectl describe.
	SourceUIDs map[string]types.UID
	// ConfigMapMissing is set by Load when kube-system/myelin-config does not exist:
	// the cluster-wide keys then have their built-in defaults.
	ConfigMapMissing bool
}

// Warning is what an operator must know about where the configuration came from:
// "" unless the ConfigMap was missing.
func (c Config) Warning() string {
	if !c.ConfigMapMissing {
		return ""
	}
	return fmt.Sprintf("ConfigMap %s/%s not found: built-in defaults are used for every key it would set; create it to configure myelin, then restart the agent",
		ConfigMapNamespace, ConfigMapName)
}

// SourceSummary says in one line where the configuration came from, for logs and
// status; with the ConfigMap missing it says so and how to fix it.
func (c Config) SourceSummary() string {
	s := "built-in defaults"
	if len(c.Sources) > 0 {
		s = strings.Join(c.Sources, ", ") + " over built-in defaults"
	}
	if w := c.Warning(); w != "" {
		s += "; " + w
	}
	return s
}

// PortRange is an inclusive range of ports; the zero value means "not set".
type PortRange struct {
	Min, Max uint16
}

// IsZero reports whether r is unset.
func (r PortRange) IsZero() bool { return r == PortRange{} }

// Overlaps reports whether r and o share a port.
func (r PortRange) Overlaps(o PortRange) bool { return r.Min <= o.Max && o.Min <= r.Max }

// String is "MIN-MAX".
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Effective is one key's effective value and where it came from.
type Effective struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Source is one layer of configuration, e.g. the ConfigMap kube-system/myelin-config.
type Source struct {
	Name   string
	Values map[string]string
	// PerNode marks a source that applies to some nodes only (a NodeConfig): it may not
	// set keys that must be the same on every node.
	PerNode bool
	// UID is the object's UID (a NodeConfig's), so Events about it reach it; "" if none.
	UID types.UID
}

// DefaultSourceName names the built-in defaults in Effective.
const DefaultSourceName = "default"

// Resolve merges sources in order (later wins) over the built-in defaults and
// validates every key. An unknown key or a bad value is an error that names the
// source, the key, the value and what is allowed.
func Resolve(sources ...Source) (Config, error) {
	values := map[string]Effective{}
	perNode := map[string][]string{} // a tunnelClusterWideKeys key -> the per-node sources that set it, with their values
	for _, k := range keys {
		values[k.name] = Effective{Key: k.name, Value: k.def, Source: DefaultSourceName}
	}
	for _, src := range sources {
		for name, v := range src.Values {
			k, ok := keyByName(name)
			if !ok {
				return Config{}, fmt.Errorf("%s: unknown key %q; known keys: %s", src.Name, name, keyNames())
			}
			if src.PerNode && k.clusterWide() {
				return Config{}, fmt.Errorf("%s: key %q must be the same on every node; set it in the ConfigMap %s/%s instead",
					src.Name, name, ConfigMapNamespace, ConfigMapName)
			}
			if err := k.parse(&Config{}, v); err != nil {
				return Config{}, fmt.Errorf("%s: key %q value %q: %v", src.Name, name, v, err)
			}
			values[name] = Effective{Key: name, Value: v, Source: src.Name}
			if _, ok := tunnelClusterWideKeys[name]; ok && src.PerNode {
				perNode[name] = append(perNode[name], fmt.Sprintf("%s (value %q)", src.Name, v))
			}
		}
	}
	var c Config
	for _, src := range sources {
		c.Sources = append(c.Sources, src.Name)
		if src.UID != "" {
			if c.SourceUIDs == nil {
				c.SourceUIDs = map[string]types.UID{}
			}
			c.SourceUIDs[src.Name] = src.UID
		}
	}
	for _, k := range keys {
		e := values[k.name]
		if err := k.parse(&c, e.Value); err != nil {
			return Config{}, fmt.Errorf("%s: key %q value %q: %v", e.Source, k.name, e.Value, err)
		}
		c.Effective = append(c.Effective, e)
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(perNode)) {
		if c.RoutingMode == RoutingTunnel {
			return Config{}, fmt.Errorf("key %q is set by %s: it must be the same on every node in tunnel mode (%s); remove it there and set it in the ConfigMap %s/%s instead (or use routing-mode native)",
				name, strings.Join(perNode[name], ", "), tunnelClusterWideKeys[name], ConfigMapNamespace, ConfigMapName)
		}
	}
	return c, nil
}

// PodMaxAuto is "auto" of a per-pod budget key (policy-ct-pod-max, nat-pod-max,
// lb-ct-pod-max): a quarter of the table.
const PodMaxAuto = -1

// quarterIfAuto resolves a per-pod budget: a quarter of whole for PodMaxAuto.
func quarterIfAuto(budget, whole int) int {
	if budget == PodMaxAuto {
		return whole / 4
	}
	return budget
}

// PolicyCTPodBudget is the number of policy-ct-pod-max: the entries of the
// NetworkPolicy connection table one pod may hold, 0 for no budget.
func (c Config) PolicyCTPodBudget() int { return quarterIfAuto(c.PolicyCTPodMax, c.PolicyCTMax) }

// NATPodBudget is the number of nat-pod-max: the masqueraded flows one pod may
// hold, 0 for no budget; auto, a quarter of the masquerade table's 32,768 flows
// (myelin_snat, two entries each; datapath's TestAutoPodBudgetsAreAQuarterOfTheTables
// checks the number against the programs).
func (c Config) NATPodBudget() int { return quarterIfAuto(c.NATPodMax, 32768) }

// LBCTPodBudget is the number of lb-ct-pod-max: the Service flows one pod may hold,
// 0 for no budget; auto, a quarter of the Service conntrack table's 131,072 flows
// (myelin_lb_ct, two entries each).
func (c Config) LBCTPodBudget() int { return quarterIfAuto(c.LBCTPodMax, 131072) }

// validate checks rules that span keys.
func (c Config) validate() error {
	if c.IPv4NativeRoutingCIDR.IsValid() && !c.IPv4NativeRoutingCIDR.Overlaps(c.ClusterCIDR) {
		return fmt.Errorf("key %q value %v does not contain the cluster CIDR %v: pod traffic to it would be masqueraded; set it to a range that includes %v",
			"ipv4-native-routing-cidr", c.IPv4NativeRoutingCIDR, c.ClusterCIDR, c.ClusterCIDR)
	}
	return nil
}

// Source returns where the effective value of key came from.
func (c Config) Source(key string) string {
	for _, e := range c.Effective {
		if e.Key == key {
			return e.Source
		}
	}
	return ""
}
