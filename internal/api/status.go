package api

import "time"

// Status is everything `myelin status` shows for one node.
type Status struct {
	Node       string       `json:"node"`
	Config     ConfigInfo   `json:"config"`
	Kubernetes K8sStatus    `json:"kubernetes"`
	Datapath   DatapathInfo `json:"datapath"`
	Routing    RoutingInfo  `json:"routing"`
	Masquerade string       `json:"masquerading"`
	// SourceCheck says whether pods' packets must carry their own address
	// and MAC; Warning is set when they need not.
	SourceCheck SourceCheckInfo `json:"sourceIPVerification"`
	KubeProxy   string          `json:"kubeProxyReplacement"`
	// SocketLB says whether Services are translated at connect() (bpf-lb-sock) or
	// by the tc path only, and why; "" without kube-proxy-replacement.
	SocketLB  string     `json:"socketLB,omitempty"`
	MTU       MTUInfo    `json:"mtu"`
	BIGTCP    BIGTCPInfo `json:"bigTCP"`
	IPAM      IPAMInfo   `json:"ipam"`
	Endpoints int        `json:"endpoints"`
	Nodes     NodesInfo  `json:"nodes"`
	// Health is the node health matrix at a glance (GET /v1/health has every
	// peer); nil while the agent does not probe (starting, cluster-health-port 0).
	Health   *HealthSummary `json:"health,omitempty"`
	Maps     []MapFill      `json:"maps"`
	NAT      NATInfo        `json:"nat"`
	Counters []Counter      `json:"counters"`
	Guard    GuardInfo      `json:"userIPTablesGuard"`
	// Policy summarises NetworkPolicy enforcement (GET /v1/policy has each pod);
	// nil until the policy loop has computed once.
	Policy  *PolicySummary `json:"networkPolicy,omitempty"`
	Loops   []LoopStatus   `json:"controlLoops"`
	Started time.Time      `json:"started"`
}

// ConfigInfo says where the node's configuration came from.
type ConfigInfo struct {
	Sources string `json:"sources"`           // e.g. "ConfigMap kube-system/myelin-config over built-in defaults"
	Warning string `json:"warning,omitempty"` // e.g. the ConfigMap does not exist
}

// K8sStatus is the agent's view of the apiserver.
type K8sStatus struct {
	Connected bool   `json:"connected"`
	Version   string `json:"version,omitempty"`
	Error     string `json:"error,omitempty"`
}

// DatapathInfo describes how pods are attached.
type DatapathInfo struct {
	Device     string `json:"device"`     // "veth"
	AttachMode string `json:"attachMode"` // "tcx" or "tc"
	Uplink     string `json:"uplink"`
}

// RoutingInfo is the node's routing and host-routing mode, with the reason for it.
type RoutingInfo struct {
	Mode                 string `json:"mode"`        // native | tunnel
	HostRouting          string `json:"hostRouting"` // BPF | Legacy
	HostRoutingReason    string `json:"hostRoutingReason"`
	AutoDirectNodeRoutes bool   `json:"autoDirectNodeRoutes"`
	Routes               int    `json:"routes"`
	// Tunnel, in tunnel mode, is who encapsulates and decapsulates pods' VXLAN:
	// "BPF" (the programs, myelin_vxlan only for what they leave to it) or
	// "myelin_vxlan", with TunnelReason.
	Tunnel       string `json:"tunnel,omitempty"`
	TunnelReason string `json:"tunnelReason,omitempty"`
	// Unroutable are the nodes without a route or tunnel, "node: reason": not on this
	// node's L2 segment, or refused for a PodCIDR another Node (or this one) holds, an
	// IP that is this node's or a pod's, or addresses that cannot be a node's
	// (routing.Peers).
	Unroutable []string `json:"unroutable,omitempty"`
}

// MTUInfo is the device MTU and the MTU on pod routes.
type MTUInfo struct {
	Device int `json:"device"`
	Route  int `json:"route"`
}

// BIGTCPInfo says whether IPv4 BIG TCP (enable-ipv4-big-tcp) is on for new pods,
// at what size on which devices, and why not when the key asks for it.
type BIGTCPInfo struct {
	Enabled bool     `json:"enabled"`           // the key
	Size    int      `json:"size,omitempty"`    // gso/gro_ipv4_max_size of new pods' veths; 0: the kernel's 64 KiB
	Devices []string `json:"devices,omitempty"` // the node's devices set to Size (uplink, overlay)
	Reason  string   `json:"reason,omitempty"`  // why Size is 0 with the key on
}

// IPAMInfo is the pod IP pool's fill.
type IPAMInfo struct {
	CIDR  string `json:"cidr"`
	Used  int    `json:"used"`
	Total int    `json:"total"`
}

// NodesInfo counts the cluster's nodes as this agent sees them.
type NodesInfo struct {
	Known int `json:"known"`
}

// MapFill is one BPF map's fill.
type MapFill struct {
	Name    string `json:"name"`
	Entries int    `json:"entries"`
	Max     int    `json:"max"`
}

// SourceCheckInfo is the state of enable-source-ip-verification, and of
// pod-source-from-hosts (UplinkPodCIDR, UplinkOff).
type SourceCheckInfo struct {
	Enabled bool   `json:"enabled"`
	Warning string `json:"warning,omitempty"`
	// UplinkPodCIDR is this node's PodCIDR when a packet from it that another host
	// sends is dropped as spoofed (on the uplink, or delivered into a pod from any
	// device but that pod's veth: a host on the underlay posing as a pod of the
	// node); empty when it is not, and UplinkOff says why.
	UplinkPodCIDR string `json:"uplinkPodCIDR,omitempty"`
	UplinkOff     string `json:"uplinkOff,omitempty"`
	// OtherNodesPods says, in tunnel mode, where the sources of other nodes' pods
	// are checked (tunnel-pod-to-node); empty in native routing.
	OtherNodesPods string `json:"otherNodesPods,omitempty"`
}

// NATInfo is the state of BPF NAT (masquerade and NodePort SNAT).
type NATInfo struct {
	// Ports is the range NAT ports are taken from ("61000-65535"), disjoint
	// from the node's ephemeral ports.
	Ports string `json:"ports"`
	// NodePort counts the NodePort SNAT flows; nil without kube-proxy replacement.
	NodePort *NodePortNATInfo `json:"nodePort,omitempty"`
	// Warnings name NAT tables that are full or nearly full, and what that does.
	Warnings []string `json:"warnings,omitempty"`
}

// NodePortNATInfo counts the flows of the NodePort SNAT tables since they were created.
type NodePortNATInfo struct {
	Created  uint64 `json:"created"`  // embryonic flows created (one per SYN or first datagram of a new client port)
	Promoted uint64 `json:"promoted"` // TCP flows that completed their handshake
	// UDPAnswered counts UDP flows whose client sent again after the
	// backend's reply (moved to the answered UDP table).
	UDPAnswered uint64 `json:"udpAnswered"`
	// Evicted estimates the embryonic flows evicted from the LRU before
	// completing: created, less promoted, less answered, less those still
	// there.
	Evicted     uint64 `json:"evicted"`
	RepliesLost uint64 `json:"repliesLost"` // backend replies that found their flow evicted
}

// GuardInfo is what the user-iptables guard found: table/chain places of firewall rules
// that neither myelin nor kube-proxy created.
type GuardInfo struct {
	Setting string   `json:"setting"`
	Found   []string `json:"found,omitempty"`
	Warning string   `json:"warning,omitempty"`
}

// Counter is one datapath counter: packets and bytes by direction and reason.
type Counter struct {
	Direction string `json:"direction"`
	Reason    string `json:"reason"`
	Packets   uint64 `json:"packets"`
	Bytes     uint64 `json:"bytes"`
}

// LoopStatus is the health of one of the agent's control loops.
type LoopStatus struct {
	Name      string    `json:"name"`
	LastRun   time.Time `json:"lastRun,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	ErrorTime time.Time `json:"errorTime,omitzero"`
}

// Event is one datapath event streamed by /v1/monitor, with pod names resolved.
type Event struct {
	Time      time.Time `json:"time"`
	Type      string    `json:"type"` // drop | trace | lost
	Reason    string    `json:"reason,omitempty"`
	Direction string    `json:"direction,omitempty"`
	IfIndex   int       `json:"ifindex,omitempty"`
	Src       string    `json:"src,omitempty"`
	Dst       string    `json:"dst,omitempty"`
	SrcPod    string    `json:"srcPod,omitempty"`
	DstPod    string    `json:"dstPod,omitempty"`
	Proto     string    `json:"proto,omitempty"`
	SrcPort   uint16    `json:"srcPort,omitempty"`
	DstPort   uint16    `json:"dstPort,omitempty"`
	Len       uint32    `json:"len,omitempty"`
	Lost      uint64    `json:"lost,omitempty"` // for type lost: events lost since the last report
	// PolicyDirection is "ingress" or "egress" for NetworkPolicy drops.
	PolicyDirection string `json:"policyDirection,omitempty"`
}

// PolicySummary is NetworkPolicy enforcement on a node at a glance.
type PolicySummary struct {
	Policies int `json:"policies"` // NetworkPolicies the node knows
	Isolated int `json:"isolated"` // local pods with ingress or egress enforced
	// Warnings are what the datapath can't enforce as written (the affected pods fail
	// closed) and the last apply's error.
	Warnings []string `json:"warnings,omitempty"`
}
