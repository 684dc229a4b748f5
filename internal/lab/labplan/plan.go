package labplan

import (
	"fmt"
	"net/netip"
)

// Names of what the lab creates. Every kernel-global name starts with NamePrefix.
const (
	NamePrefix       = "myelin-"
	NetNS            = "myelin-lab-net" // underlay bridges and the router
	ExtNS            = "myelin-lab-ext" // "the internet": one external server
	CPNS             = "myelin-lab-cp"  // the control plane: etcd, apiserver, controllers
	PodNSPrefix      = "myelin-pod-"    // pod network namespaces made by the lab kubelets
	ControlPlaneLink = "myelin-cp"      // the one link in the root netns
	NodeNSPrefix     = "myelin-node-"   // node network namespaces: myelin-node-N
)

// Ports of the control plane, all bound to the control-plane address only, except
// etcd's peer port: a one-member etcd has no peers, so it listens on 127.0.0.1 in CPNS.
const (
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	APIServerPort         = 6443
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
	ExternalHTTPPort      = 80
)

// Addressing is the lab's network plan (docs/architecture.md, "The lab's network plan"). Every range can be changed; the
// defaults keep clear of the machine's own uplink (192.0.2.0/24).
type Addressing struct {
	SegmentA     netip.Prefix // underlay A: control-plane host, router, nodes
	SegmentB     netip.Prefix // underlay B behind the router (--underlay l3)
	External     netip.Prefix // the external host's network
	ClusterCIDR  netip.Prefix // pod CIDR, split into per-node PodCIDRs by the controller-manager
	NodeCIDRMask int          // size of each node's PodCIDR
	ServiceCIDR  netip.Prefix
}

// DefaultAddressing returns the default plan (docs/architecture.md).
func DefaultAddressing() Addressing {
	return Addressing{
		SegmentA:     netip.MustParsePrefix("198.18.0.0/24"),
		SegmentB:     netip.MustParsePrefix("198.18.1.0/24"),
		External:     netip.MustParsePrefix("203.0.113.0/24"),
		ClusterCIDR:  netip.MustParsePrefix("10.244.0.0/16"),
		NodeCIDRMask: 24,
		ServiceCIDR:  netip.MustParsePrefix("10.96.0.0/16"),
	}
}

// machineUplink is the range of the machine's own network; the lab must never use it.
var machineUplink = netip.MustParsePrefix("192.0.2.0/24")

// Validate checks that the ranges are IPv4, large enough and disjoint.
func (a Addressing) Validate() error {
	ranges := []struct {
		name string
		p    netip.Prefix
		max  int // longest prefix length that still fits what the lab puts there
	}{
		{"segment A", a.SegmentA, 24},
		{"segment B", a.SegmentB, 24},
		{"external network", a.External, 24},
		{"cluster CIDR", a.ClusterCIDR, a.NodeCIDRMask - 4},
		{"service CIDR", a.ServiceCIDR, 24},
	}
	for i, r := range ranges {
		if !r.p.IsValid() || !r.p.Addr().Is4() {
			return fmt.Errorf("%s %v: must be an IPv4 CIDR", r.name, r.p)
		}
		if r.p != r.p.Masked() {
			return fmt.Errorf("%s %v: host bits set; use %v", r.name, r.p, r.p.Masked())
		}
		if r.p.Bits() > r.max {
			return fmt.Errorf("%s %v: too small; use a /%d or larger", r.name, r.p, r.max)
		}
		if r.p.Overlaps(machineUplink) {
			return fmt.Errorf("%s %v: overlaps the machine's uplink %v; pick another range", r.name, r.p, machineUplink)
		}
		for _, other := range ranges[:i] {
			if r.p.Overlaps(other.p) {
				return fmt.Errorf("%s %v overlaps %s %v; the lab's ranges must be disjoint", r.name, r.p, other.name, other.p)
			}
		}
	}
	if a.NodeCIDRMask < 16 || a.NodeCIDRMask > 28 {
		return fmt.Errorf("node CIDR mask /%d: must be between /16 and /28", a.NodeCIDRMask)
	}
	return nil
}

// hostAddr returns the n-th address of p (n = 1 is the first host address).
func hostAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ControlPlaneIP is the control plane's address (apiserver, etcd), in netns CPNS.
func (a Addressing) ControlPlaneIP() netip.Addr { return hostAddr(a.SegmentA, 1) }

// EtcdURL is the lab etcd's client URL. etcd serves it over TLS and accepts only
// clients presenting the etcd client certificate (Paths.EtcdClientTLS): the control-plane
// address is reachable from the root netns and from pods.
func (a Addressing) EtcdURL() string {
	return fmt.Sprintf("https://%s:%d", a.ControlPlaneIP(), EtcdClientPort)
}

// HostIP is the root netns's address on segment A (link ControlPlaneLink): the
// developer's tools reach the control plane and the nodes' segment-A addresses from it.
func (a Addressing) HostIP() netip.Addr { return hostAddr(a.SegmentA, 2) }

// RouterIP returns the router's address on a segment (the nodes' default gateway).
func (a Addressing) RouterIP(segment netip.Prefix) netip.Addr { return hostAddr(segment, 254) }

// ExternalGateway is the router's address on the external network.
func (a Addressing) ExternalGateway() netip.Addr { return hostAddr(a.External, 1) }

// ExternalServerIP is the external host, serving HTTP on port 80.
func (a Addressing) ExternalServerIP() netip.Addr { return hostAddr(a.External, 10) }

// APIServerServiceIP is the first address of the service CIDR (the "kubernetes" Service).
func (a Addressing) APIServerServiceIP() netip.Addr { return hostAddr(a.ServiceCIDR, 1) }

// DNSServiceIP is the cluster DNS Service's address (kube-dns, internal/clusterdns), the
// tenth of the service CIDR as in kubeadm clusters; the kubelets' clusterDNS.
func (a Addressing) DNSServiceIP() netip.Addr { return hostAddr(a.ServiceCIDR, 10) }

// Node is one lab node as planned.
type Node struct {
	Name    string       // node name, also its netns name: myelin-node-N
	Index   int          // 1-based
	IP      netip.Addr   // eth0 address, the Node's InternalIP
	Segment netip.Prefix // the underlay segment eth0 is on
	Gateway netip.Addr   // the router on that segment
	Peer    string       // the veth end in myelin-lab-net, on the segment's bridge
}

// Plan is the complete, pure description of a lab: what Up builds and Down removes.
type Plan struct {
	Options    Options
	Addressing Addressing
	Nodes      []Node
}

// NodeName returns the name of the i-th node (1-based).
func NodeName(i int) string { return fmt.Sprintf("%s%d", NodeNSPrefix, i) }

// NewPlan validates the options and the addressing and lays out the nodes.
func NewPlan(o Options, a Addressing) (Plan, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return Plan{}, err
	}
	if err := a.Validate(); err != nil {
		return Plan{}, err
	}
	p := Plan{Options: o, Addressing: a}
	for i := 1; i <= o.Nodes; i++ {
		seg := a.SegmentA
		if o.Underlay == UnderlayL3 && i%2 == 0 {
			seg = a.SegmentB
		}
		p.Nodes = append(p.Nodes, Node{
			Name:    NodeName(i),
			Index:   i,
			IP:      hostAddr(seg, 10+i),
			Segment: seg,
			Gateway: a.RouterIP(seg),
			Peer:    fmt.Sprintf("myelin-n%d", i),
		})
	}
	return p, nil
}

// Node returns the planned node with the given name.
func (p Plan) Node(name string) (Node, bool) {
	for _, n := range p.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// FloodTargets are the addresses the lab's attacker (lab syn-flood) may send forged
// SYNs to: the nodes' addresses and the pod range, what a NodePort or a pod serves on.
// Never the machine's own lab address (HostIP, on ControlPlaneLink in the root netns),
// the control plane's or the router's.
func (p Plan) FloodTargets() []netip.Prefix {
	var out []netip.Prefix
	for _, n := range p.Nodes {
		out = append(out, netip.PrefixFrom(n.IP, 32))
	}
	return append(out, p.Addressing.ClusterCIDR)
}
