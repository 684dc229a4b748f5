package agent

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// nodePlan is how this node runs: every mode the agent's parts act on, decided once
// at start (decidePlan, pure) from the configuration, the kernel's features and the
// node, then handed to each part by value. Nothing reads a mode from config.Config
// afterwards; the configuration stays only for what the API shows of it.
type nodePlan struct {
	Node        string
	NodeIP      netip.Addr // this node's InternalIP (the tunnel endpoint, NodePort address)
	ClusterCIDR netip.Prefix

	Tunnel     bool   // routing-mode tunnel: VXLAN to other nodes
	TunnelPort uint16 // the VXLAN UDP port in tunnel mode
	// BPFTunnel: the BPF programs encapsulate and decapsulate VXLAN themselves
	// where they can (tunnel mode, BPF host routing, enable-bpf-tunnel).
	BPFTunnel            bool
	AutoDirectNodeRoutes bool // native routing: routes to other nodes' PodCIDRs
	HostRouting          hostRoutingDecision

	Masquerade masqueradeMode
	// NoMasqueradeBase is what pod traffic never masquerades to before any Node is
	// known: the cluster CIDR, ipv4-native-routing-cidr and non-masquerade-cidrs.
	NoMasqueradeBase []netip.Prefix

	KubeProxyReplacement bool   // myelin serves Services (BPF load balancing)
	LBAlgorithm          string // random or maglev
	SocketLB             bool   // bpf-lb-sock (with KubeProxyReplacement): also translate at connect()
	KubeProxyHealthz     string // kube-proxy-replacement-healthz-bind-address ("" off)
	KubeProxyMetrics     string // kube-proxy-replacement-metrics-bind-address ("" off)
	CgroupRoot           string // cgroup-root: where socket-LB attaches; "" the cgroup2 mount
	MaglevTableSize      int    // 0 unless LBAlgorithm is maglev
	SourceValidation     bool   // enable-source-ip-verification
	// UplinkPodCIDR is this node's PodCIDR where a packet from it that another host
	// sends is dropped as spoofed (pod-source-from-hosts, decideUplinkPodCheck),
	// unset where it is not, and UplinkPodCheckOff then says why.
	UplinkPodCIDR     netip.Prefix
	UplinkPodCheckOff string
	// TunnelPodToNode is tunnel-pod-to-node (tunnel mode): how pods reach other
	// nodes' IPs, and whether plain ones arriving here are forged.
	TunnelPodToNode config.TunnelPodToNode

	MTU      int // pod devices
	RouteMTU int // pod routes: MTU, less the tunnel overhead in tunnel mode

	NATPorts          config.PortRange // masquerade and NodePort SNAT
	NodePortNATSynMax int
	NodePortNATMax    int
	NodePortNATUDPMax int
	PolicyCTMax       int
	PolicyCTPodMax    int // resolved: 0 is no budget
	NATPodMax         int // resolved: 0 is no budget
	LBCTPodMax        int // resolved: 0 is no budget

	AttachMode string // "tcx" or "tc", as the kernel offers

	// BIGTCP is enable-ipv4-big-tcp as decided on the node's devices (bigtcp.go):
	// the key in decidePlan, the size once startDatapath has set the devices.
	BIGTCP bigTCPState
}

// masqueradeMode is who masquerades pod traffic leaving the cluster.
type masqueradeMode int

const (
	masqueradeOff      masqueradeMode = iota // enable-ipv4-masquerade false
	masqueradeBPF                            // myelin_to_netdev
	masqueradeIPTables                       // the nat chain of internal/iptables
)

// planInputs are the facts about the node the plan is decided from, gathered by the
// caller (probes, files, the Node object) so that decidePlan stays pure.
type planInputs struct {
	Node      string
	NodeIP    netip.Addr
	PodCIDR   netip.Prefix
	Features  datapath.Features
	UserRules []string         // firewall rules the guard found at start
	Ephemeral config.PortRange // net.ipv4.ip_local_port_range
	UplinkMTU int
}

// decidePlan decides the node's modes. An error names the key or fact that makes the
// configuration impossible on this node; nothing has been changed on it yet.
func decidePlan(c config.Config, in planInputs) (nodePlan, error) {
	hr, err := decideHostRouting(c, in.Features, in.UserRules)
	if err != nil {
		return nodePlan{}, err
	}
	ports, err := natPorts(c.NATPortRange, in.Ephemeral)
	if err != nil {
		return nodePlan{}, err
	}
	p := nodePlan{
		Node: in.Node, NodeIP: in.NodeIP, ClusterCIDR: c.ClusterCIDR,
		Tunnel: c.RoutingMode == config.RoutingTunnel, TunnelPort: c.TunnelPort,
		AutoDirectNodeRoutes: c.AutoDirectNodeRoutes, HostRouting: hr,
		NoMasqueradeBase:     noMasqueradeBase(c),
		KubeProxyReplacement: c.KubeProxyReplacement, LBAlgorithm: c.LBAlgorithm,
		SourceValidation: c.EnableSourceIPVerification,
		SocketLB:         c.BPFLBSock && c.KubeProxyReplacement, CgroupRoot: c.CgroupRoot,
		KubeProxyHealthz: c.KubeProxyHealthzAddr, KubeProxyMetrics: c.KubeProxyMetricsAddr,
		MTU: c.MTU, NATPorts: ports,
		NodePortNATSynMax: c.NodePortNATSynMax, NodePortNATMax: c.NodePortNATMax, NodePortNATUDPMax: c.NodePortNATUDPMax, PolicyCTMax: c.PolicyCTMax,
		PolicyCTPodMax: c.PolicyCTPodBudget(), NATPodMax: c.NATPodBudget(), LBCTPodMax: c.LBCTPodBudget(),
		AttachMode: "tcx", BIGTCP: bigTCPState{Enabled: c.EnableIPv4BIGTCP},
	}
	switch {
	case !c.EnableIPv4Masquerade:
		p.Masquerade = masqueradeOff
	case c.EnableBPFMasquerade:
		p.Masquerade = masqueradeBPF
	default:
		p.Masquerade = masqueradeIPTables
	}
	if c.LBAlgorithm == config.LBMaglev {
		p.MaglevTableSize = c.MaglevTableSize
	}
	if p.MTU == 0 {
		p.MTU = in.UplinkMTU
	}
	p.RouteMTU = p.MTU
	if p.Tunnel {
		if !in.NodeIP.Is4() {
			return nodePlan{}, fmt.Errorf("node %s has no IPv4 InternalIP; tunnel mode needs one as its tunnel endpoint", in.Node)
		}
		p.RouteMTU = p.MTU - tunnel.Overhead
	}
	p.BPFTunnel = p.Tunnel && hr.BPF && c.EnableBPFTunnel
	if p.TunnelPodToNode, err = decideTunnelPodToNode(c, p); err != nil {
		return nodePlan{}, err
	}
	p.UplinkPodCIDR, p.UplinkPodCheckOff = decideUplinkPodCheck(p, c.PodSourceFromHosts, in.PodCIDR)
	if !in.Features.TCX {
		p.AttachMode = "tc"
	}
	return p, nil
}

// decideTunnelPodToNode checks that tunnel-pod-to-node can be honoured: anything
// but plain needs tunnel mode (an overlay to send through) and the health probes
// (which tell the nodes that receive). With BPF host routing the programs
// encapsulate; with legacy host routing the stack, by a rule and a table of encap
// routes (tunnel.SyncPodToNode).
func decideTunnelPodToNode(c config.Config, p nodePlan) (config.TunnelPodToNode, error) {
	mode := c.TunnelPodToNode
	if mode == "" || mode == config.TunnelPodToNodePlain {
		return config.TunnelPodToNodePlain, nil
	}
	src := c.Source("tunnel-pod-to-node")
	switch {
	case !p.Tunnel:
		return "", fmt.Errorf("tunnel-pod-to-node is %s (%s) but routing-mode is native: there is no overlay to send through; set tunnel-pod-to-node to plain", mode, src)
	case c.ClusterHealthPort == 0:
		return "", fmt.Errorf("tunnel-pod-to-node is %s (%s) but cluster-health-port is 0: a node learns which others take pods' packets to their IP through the overlay from their health responders; set cluster-health-port (default 4240) or tunnel-pod-to-node to plain", mode, src)
	}
	return mode, nil
}

// decideUplinkPodCheck returns this node's PodCIDR where a packet from it that
// another host sends (on the uplink, or any device but its pod's veth) is dropped
// as forged; else no prefix and the reason. pod-source-from-hosts drop and allow
// decide it outright; auto decides it as follows. A pod's packet comes back from
// another host only through a relay that keeps its source and picks a pod of this
// node: then the reply goes from that pod straight to the client, past the relay,
// so only one-way flows could work that way. auto leaves the check off where pods
// reach hosts beyond the cluster with their own addresses (masquerade off, a
// no-masquerade destination outside cluster-cidr: ipv4-native-routing-cidr or
// non-masquerade-cidrs), as such a relay may stand there; myelin's own NodePorts
// translate a pod client's source, and other nodes answer from their own. auto is
// off where source validation is.
func decideUplinkPodCheck(p nodePlan, mode config.PodSourceFromHosts, podCIDR netip.Prefix) (netip.Prefix, string) {
	switch mode {
	case config.PodSourceFromHostsDrop:
		return podCIDR, ""
	case config.PodSourceFromHostsAllow:
		return netip.Prefix{}, "pod-source-from-hosts is allow"
	}
	if why := uplinkPodCheckAutoOff(p); why != "" {
		return netip.Prefix{}, why + " (pod-source-from-hosts: drop checks them anyway)"
	}
	return podCIDR, ""
}

// uplinkPodCheckAutoOff is why pod-source-from-hosts auto leaves the check off, or "".
func uplinkPodCheckAutoOff(p nodePlan) string {
	switch {
	case !p.SourceValidation:
		return "enable-source-ip-verification is false"
	case p.Masquerade == masqueradeOff:
		return "enable-ipv4-masquerade is false: pods reach hosts beyond the cluster with their own addresses"
	}
	for _, d := range p.NoMasqueradeBase {
		if !routing.Within(p.ClusterCIDR, d) {
			return fmt.Sprintf("pods reach %s (ipv4-native-routing-cidr or non-masquerade-cidrs), beyond cluster-cidr %s, with their own addresses", d, p.ClusterCIDR)
		}
	}
	return ""
}

// RoutingMode is "native" or "tunnel", as status shows it.
func (p nodePlan) RoutingMode() string {
	if p.Tunnel {
		return string(config.RoutingTunnel)
	}
	return string(config.RoutingNative)
}

// tunnelDatapath is who handles tunnel mode's VXLAN and why, as status shows it
// ("" in native routing); source is where enable-bpf-tunnel came from.
func (p nodePlan) tunnelDatapath(source string) (who, reason string) {
	switch {
	case !p.Tunnel:
		return "", ""
	case p.BPFTunnel:
		return "BPF", "enable-bpf-tunnel; GSO packets received and what BPF can't route go through myelin_vxlan"
	case !p.HostRouting.BPF:
		return tunnel.DeviceName, "legacy host routing"
	default:
		return tunnel.DeviceName, "enable-bpf-tunnel is false (" + source + ")"
	}
}

// datapathConfig is what the BPF programs are loaded with; the caller adds the
// overlay device's index and MAC in tunnel mode. The tunnel port goes to the
// programs only when they handle VXLAN themselves (BPFTunnel).
func (p nodePlan) datapathConfig(pinDir string) datapath.Config {
	mode := datapath.HostRoutingLegacy
	if p.HostRouting.BPF {
		mode = datapath.HostRoutingBPF
	}
	var port uint16
	if p.BPFTunnel {
		port = p.TunnelPort
	}
	return datapath.Config{PinDir: pinDir, HostRouting: mode, TunnelPort: port,
		Masquerade: p.Masquerade == masqueradeBPF, NodeIP: p.NodeIP, ClusterCIDR: p.ClusterCIDR,
		LoadBalancing: p.KubeProxyReplacement, SocketLB: p.SocketLB, NoSourceVerification: !p.SourceValidation,
		LocalPodCIDR: p.UplinkPodCIDR, TunnelPodToNode: p.tunnelPodToNode(),
		NATPortMin: p.NATPorts.Min, NATPortMax: p.NATPorts.Max,
		MaglevTableSize: uint32(p.MaglevTableSize),
		NodePortSynMax:  uint32(p.NodePortNATSynMax), NodePortNATMax: uint32(p.NodePortNATMax),
		NodePortUDPMax: uint32(p.NodePortNATUDPMax),
		PolicyCTMax:    uint32(p.PolicyCTMax), PolicyCTPodMax: uint32(p.PolicyCTPodMax),
		NATPodMax: uint32(p.NATPodMax), LBCTPodMax: uint32(p.LBCTPodMax)}
}

// otherNodesPods says where, in tunnel mode, the sources of other nodes' pods are
// checked, as status shows it ("" in native routing, where they arrive as routed);
// source is where tunnel-pod-to-node came from.
func (p nodePlan) otherNodesPods(source string) string {
	if !p.Tunnel {
		return ""
	}
	switch p.TunnelPodToNode {
	case config.TunnelPodToNodeEncapsulate:
		return "pods reach other nodes' IPs through the overlay; plain packets from pod addresses to this node's IP are counted (PLAIN_POD_TO_NODE), not dropped (tunnel-pod-to-node is encapsulate, " + source + ")"
	case config.TunnelPodToNodeEnforce:
		return "only through the overlay: plain packets from pod addresses to this node's IP, and those of other nodes' pods that another device brings in, are dropped as spoofed (tunnel-pod-to-node is enforce, " + source + ")"
	}
	return "checked where they reach pods (the tunnel peer rule); their plain packets to this node's IP are not (tunnel-pod-to-node is plain, " + source + ")"
}

// tunnelPodToNode is the plan's tunnel-pod-to-node as the programs take it.
func (p nodePlan) tunnelPodToNode() datapath.TunnelPodToNode {
	switch p.TunnelPodToNode {
	case config.TunnelPodToNodeEncapsulate:
		return datapath.TunnelPodToNodeEncapsulate
	case config.TunnelPodToNodeEnforce:
		return datapath.TunnelPodToNodeEnforce
	}
	return datapath.TunnelPodToNodePlain
}

// noMasqueradeBase is the cluster CIDR, ipv4-native-routing-cidr and every
// non-masquerade-cidr: the destinations that keep their source whatever the Nodes.
func noMasqueradeBase(c config.Config) []netip.Prefix {
	out := []netip.Prefix{c.ClusterCIDR}
	if c.IPv4NativeRoutingCIDR.IsValid() {
		out = append(out, c.IPv4NativeRoutingCIDR)
	}
	return append(out, c.NonMasqueradeCIDRs...)
}

// sortPrefixes sorts by address, then by length.
func sortPrefixes(out []netip.Prefix) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr() != out[j].Addr() {
			return out[i].Addr().Less(out[j].Addr())
		}
		return out[i].Bits() < out[j].Bits()
	})
}
