package datapath

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// HostRouting selects who routes pod traffic on the node.
type HostRouting int

const (
	// HostRoutingLegacy hands every packet to the kernel stack, which routes
	// it with its routes, neighbours and netfilter as usual.
	HostRoutingLegacy HostRouting = iota
	// HostRoutingBPF routes in BPF: bpf_redirect_peer into local pods, FIB
	// lookup plus bpf_redirect_neigh for everything else.
	HostRoutingBPF
)

// String returns "legacy" or "bpf".
func (h HostRouting) String() string {
	switch h {
	case HostRoutingLegacy:
		return "legacy"
	case HostRoutingBPF:
		return "bpf"
	}
	return fmt.Sprintf("HostRouting(%d)", int(h))
}

// Config is what Load needs; it is not changed after Load.
type Config struct {
	// PinDir is the bpffs directory for maps and links, for example
	// /sys/fs/bpf/myelin/<node>. Created if missing.
	PinDir string
	// HostRouting is baked into the programs at load time.
	HostRouting HostRouting
	// EndpointsMax sizes the endpoints map; 0 keeps the object's size
	// (ENDPOINTS_MAX_DEFAULT in bpf/lib/maps.h: 1,024).
	EndpointsMax uint32
	// Tunnel is routing-mode tunnel: with BPF host routing, pods of other
	// nodes (the PodCIDRs in the tunnel map, see UpsertTunnel) are reached
	// through the VXLAN device instead of the FIB. With legacy host routing
	// it changes nothing in BPF: the kernel encapsulates by encap routes.
	Tunnel bool
	// OverlayIfIndex is the ifindex of the collect-metadata VXLAN device
	// myelin_vxlan in the node netns, the redirect target of encapsulated
	// packets. Required when Tunnel is set; baked in at load, so a recreated
	// device needs a new Load.
	OverlayIfIndex int
	// OverlayMAC is this node's myelin_vxlan MAC, OverlayMAC(node IP): the inner
	// source of encapsulated frames. Required when Tunnel is set.
	OverlayMAC net.HardwareAddr
	// TunnelPort is myelin_vxlan's UDP port (tunnel-port). With Tunnel and
	// BPF host routing, myelin_from_pod encapsulates pods' packets to other
	// nodes and myelin_from_netdev decapsulates what arrives on it for a pod
	// of this node, both without the device where they can (the rest goes
	// through it as before; docs/datapath.md, "Tunnel mode"); 0 leaves all
	// VXLAN to the device.
	TunnelPort uint16
	// TunnelPodToNode is tunnel-pod-to-node, used with Tunnel: with BPF host
	// routing TunnelPodToNodeEncapsulate sends pods' packets to other nodes' IPs
	// (the tunnel node map) through the overlay too (with legacy host routing the
	// stack does, by the agent's routes: the programs only check what arrives);
	// TunnelPodToNodeEnforce also drops, as DROP_SPOOFED_SOURCE, what arrives
	// plain on the uplink from a pod address for NodeIP and what anything but
	// the overlay brings into a pod from a pod of another node (docs/datapath.md,
	// "Pods to other nodes"). The zero value sends them plain.
	TunnelPodToNode TunnelPodToNode
	// OverlayPort is myelin_vxlan's UDP port (tunnel-port) whoever
	// encapsulates: with Tunnel, UDP to it that the node's own stack sends and
	// the device did not encapsulate is dropped (docs/datapath.md, "What the
	// node itself sends"); 0 leaves that check off.
	OverlayPort uint16
	// HealthIP is this node's health address (clusterhealth.HealthAddr of its
	// PodCIDR): the one address of ClusterCIDR the node's own stack may send
	// from. Invalid: none.
	HealthIP netip.Addr
	// LoadBalancing turns service load balancing on (kube-proxy
	// replacement): pods' packets to service frontends are translated to a
	// backend and back, and NodePort requests on the uplink too; see
	// UpsertService. It needs NodeIP (the NodePort address and SNAT source)
	// and ClusterCIDR (destinations in it are never services), with or
	// without Masquerade. Off, every load balancing branch is pruned at
	// load and the service maps shrink to one entry.
	LoadBalancing bool
	// SocketLB says socket-LB (bpf-lb-sock, AttachSocketLB) is configured: the
	// tc programs then share the socket programs' reverse maps
	// (myelin_lb_sock_peer, myelin_lb_sock_rev, pinned by name) to name the
	// Service in the flow records of connections translated at connect() or
	// sendmsg(). Off, the tc object's copies are unpinned and empty and the
	// lookup is pruned. Used with LoadBalancing.
	SocketLB bool
	// MaglevTableSize is the size of every Maglev table (Service.Maglev), a
	// prime such as 16381; 0 means random backend selection only. Used
	// with LoadBalancing.
	MaglevTableSize uint32
	// Masquerade turns BPF masquerade on (enable-ipv4-masquerade and
	// enable-bpf-masquerade): packets from ClusterCIDR to destinations
	// outside the no-masquerade set (SetNoMasquerade) leave the uplink
	// (AttachToNetdev) with NodeIP as their source, and their replies are
	// translated back on the uplink's ingress (AttachNetdev). Off, both
	// programs leave every packet's addresses alone.
	Masquerade bool
	// NodeIP is this node's IPv4: the translated source address of
	// masquerade and of NodePort traffic to other nodes, and the NodePort
	// frontend address; NetworkPolicy lets it in; in tunnel mode the only
	// outer destination tunnelled packets are accepted at. Required with
	// Masquerade, LoadBalancing or Tunnel.
	NodeIP netip.Addr
	// ClusterCIDR holds the pod addresses: the sources that are
	// masqueraded, destinations that are never services, and in tunnel
	// mode the sources that never arrive unencapsulated on the uplink, and
	// the sources the node's own stack may not send from, and the senders
	// NetworkPolicy takes no ICMP error from but about their own packets.
	// Required with Masquerade or LoadBalancing.
	ClusterCIDR netip.Prefix
	// LocalPodCIDR is this node's PodCIDR where a packet from it that another
	// host sends is forged (the agent decides: pod-source-from-hosts, by default
	// where source validation and masquerade are on and no no-masquerade
	// destination lies outside the cluster CIDR): myelin_from_netdev
	// then drops a packet from it arriving on the uplink, and myelin_to_pod one
	// that the stack forwards from any device but the owning pod's veth, as
	// DROP_SPOOFED_SOURCE: a host on the underlay (or a second network) posing
	// as a pod of this node. The zero value checks nothing. IPv4 only.
	LocalPodCIDR netip.Prefix
	// NoSourceVerification turns the check of what pods send off
	// (enable-source-ip-verification: false): then myelin_from_pod no longer
	// drops IPv4 or ARP whose source address or MAC is not the sending
	// endpoint's own (DROP_SPOOFED_SOURCE), nor do myelin_to_netdev,
	// myelin_to_pod and myelin_to_overlay drop what the node's own stack sends
	// from a pod address or as VXLAN of its own. The zero value verifies; only
	// benchmarks comparing the check's cost should turn it off. Non-IPv4,
	// non-ARP frames from pods are dropped either way.
	NoSourceVerification bool
	// NATMax sizes the NAT map myelin_snat in entries, two per flow; 0 keeps
	// the object's size (NAT_MAX_DEFAULT: 65,536). Changing it replaces the map on the next Load, with
	// the translations of open flows copied over (those beyond a smaller size are lost).
	NATMax uint32
	// NATPortMin and NATPortMax bound the ports masquerade and NodePort SNAT
	// translate to, inclusive. Keep them outside the node's ephemeral ports
	// (EphemeralPorts), so a translated flow never takes a tuple one of the
	// node's own sockets could own. Both 0 keep the object's ports
	// (nat_port_min/_max in bpf/lib/config.h: 61000-65535, above Linux's
	// default ephemeral range 32768-60999).
	NATPortMin, NATPortMax uint16
	// NodePortSynMax sizes the LRU myelin_nodeport_syn, the NodePort flows
	// to other nodes' backends before their handshake completed (two
	// entries per flow); 0 keeps the object's size (NODEPORT_SYN_MAX).
	// Used with LoadBalancing.
	NodePortSynMax uint32
	// NodePortNATMax sizes myelin_nodeport_nat, the established NodePort
	// flows to other nodes' backends (two entries per flow); 0 keeps the
	// object's size (NODEPORT_NAT_MAX). Used with LoadBalancing.
	NodePortNATMax uint32
	// NodePortUDPMax sizes the LRU myelin_nodeport_udp, the answered UDP
	// NodePort flows to other nodes' backends (two entries per flow); 0
	// keeps the object's size (NODEPORT_UDP_MAX). Used with LoadBalancing.
	NodePortUDPMax uint32
	// PolicyCTMax sizes myelin_policy_ct, the connections NetworkPolicy tracks
	// (one slot each, in buckets of four: rounded up to a multiple of 4); 0
	// keeps the object's size (POLICY_CT_MAX). A changed size replaces the
	// pinned map, with the tracked connections placed into the new one (those
	// that find their buckets full are judged again by their next packet).
	PolicyCTMax uint32
	// PolicyCTPodMax is the most myelin_policy_ct entries one pod of this node
	// may hold (policy-ct-pod-max): GCPolicyCT lists a pod holding more in
	// myelin_policy_ct_over, and until a later round finds it within the
	// budget, its connections that would need a new entry are dropped
	// (DROP_POLICY_CT_BUDGET). 0: no budget, and the datapath looks nothing up.
	PolicyCTPodMax uint32
	// NATPodMax is the most masqueraded flows one pod of this node may hold
	// (nat-pod-max): GCNAT lists a pod holding more in myelin_snat_over, and
	// until a later round finds it within the budget, its new flows to outside
	// the cluster are dropped (DROP_NAT_BUDGET). 0: no budget, no lookup.
	NATPodMax uint32
	// LBCTPodMax is the most load-balanced flows one pod of this node may hold
	// in myelin_lb_ct (lb-ct-pod-max): GCServiceCT lists a pod holding more in
	// myelin_lb_ct_over, and until a later round finds it within the budget, its
	// new Service flows are dropped (DROP_SVC_CT_BUDGET). 0: no budget, no lookup.
	// Used with LoadBalancing.
	LBCTPodMax uint32
}

// Datapath is the loaded datapath of one node: its programs and maps.
// Its methods are safe for concurrent use.
type Datapath struct {
	cfg  Config
	objs myelinObjects
	lbMu sync.Mutex // serializes service updates
	// backendPorts and nodePorts are the port bitmaps myelin_lb_ports and
	// myelin_lb_nodeports (lbports.go).
	backendPorts, nodePorts portBitmap

	maglev maglevTables
	// attachErrors counts failed attachments (AttachErrors, for metrics).
	attachErrors atomic.Uint64
	// policyMu serializes writes of endpoints and of their policy flags,
	// which both maps hold (SetPolicyFlags, UpsertEndpoint).
	policyMu sync.Mutex
	// policyCTSeed hashes myelin_policy_ct's buckets (policyct_table.go).
	policyCTSeed uint64
	// policyCTStuck are the slots GCPolicyCT found in a write (odd count) at
	// its last round, with that count: one still at it now lost its writer.
	policyCTStuck map[int]uint32
	// replaced are the pinned maps Load replaced (ReplacedMaps).
	replaced []MapReplacement
	// oldUDPMoved is set once GCNodePortNAT moved the UDP flows an older
	// version left in myelin_nodeport_nat (moveOldUDP).
	oldUDPMoved atomic.Bool
}

// Load loads the programs with cfg's load-time constants, reusing the maps
// pinned in cfg.PinDir so endpoint entries and counters survive an agent
// restart. A pinned map whose shape no longer matches (for example after
// EndpointsMax changed) is replaced, with its entries copied over when their
// layout is unchanged (ReplacedMaps).
// Load does not attach anything: call AttachNetdev, AttachEndpoint and,
// in tunnel mode, AttachOverlay.
//
// Errors name the pin directory when it is not on bpffs; a verifier
// rejection wraps *ebpf.VerifierError (print it with %+v for the log).
func Load(cfg Config) (*Datapath, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if err := ensurePinDir(cfg.PinDir); err != nil {
		return nil, err
	}

	spec, err := loadMyelin()
	if err != nil {
		return nil, fmt.Errorf("load datapath spec: %w", err)
	}
	if err := configure(spec, cfg); err != nil {
		return nil, err
	}
	seed, err := configurePolicyCTSeed(spec, cfg.PinDir)
	if err != nil {
		return nil, err
	}
	d := &Datapath{cfg: cfg, policyCTSeed: seed}
	created, replaced, err := loadPinned(spec, cfg.PinDir, &d.objs)
	if err != nil {
		return nil, err
	}
	d.replaced = replaced
	if err := errors.Join(d.openPolicyCT(), d.restorePolicyFlags()); err != nil {
		d.Close()
		return nil, err
	}
	if err := errors.Join(d.policyCTBudget().restore(), d.natBudget().restore(), d.lbCTBudget().restore()); err != nil {
		d.Close()
		return nil, err
	}
	if cfg.LoadBalancing {
		if err := errors.Join(d.seedPortBitmaps(created), d.moveNodePortUnproven(created), d.dropStaleUDP(created)); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// checkConfig validates cfg before anything is loaded: each error names the field
// and what to set it to.
func checkConfig(cfg Config) error {
	if cfg.PinDir == "" {
		return errors.New("load datapath: empty pin dir: set Config.PinDir to a bpffs directory such as /sys/fs/bpf/myelin/<node>")
	}
	if (cfg.NATPortMin == 0) != (cfg.NATPortMax == 0) || cfg.NATPortMin > cfg.NATPortMax {
		return fmt.Errorf("load datapath: NAT ports %d-%d: set Config.NATPortMin and NATPortMax to a range 1-65535 with min <= max", cfg.NATPortMin, cfg.NATPortMax)
	}
	if cfg.HostRouting != HostRoutingLegacy && cfg.HostRouting != HostRoutingBPF {
		return fmt.Errorf("load datapath: unknown host routing %d: use HostRoutingLegacy or HostRoutingBPF", int(cfg.HostRouting))
	}
	if cfg.Tunnel && (cfg.OverlayIfIndex <= 0 || cfg.OverlayIfIndex > math.MaxInt32) {
		return fmt.Errorf("load datapath: tunnel mode with overlay ifindex %d: set Config.OverlayIfIndex to the ifindex of the VXLAN device myelin_vxlan", cfg.OverlayIfIndex)
	}
	if cfg.Tunnel && !cfg.NodeIP.Is4() {
		return fmt.Errorf("load datapath: tunnel mode with node IP %q: set Config.NodeIP to this node's IPv4, the address its peers tunnel to", cfg.NodeIP)
	}
	if cfg.TunnelPodToNode > TunnelPodToNodeEnforce {
		return fmt.Errorf("load datapath: Config.TunnelPodToNode %d is none of plain (0), encapsulate (1), enforce (2)", cfg.TunnelPodToNode)
	}
	if cfg.TunnelPodToNode != TunnelPodToNodePlain && !cfg.Tunnel {
		return errors.New("load datapath: Config.TunnelPodToNode needs tunnel mode: in native routing there is no overlay")
	}
	if err := checkMasquerade(cfg); err != nil {
		return err
	}
	if cfg.LocalPodCIDR.IsValid() && (!cfg.LocalPodCIDR.Addr().Is4() || cfg.LocalPodCIDR.Bits() == 0) {
		return fmt.Errorf("load datapath: local PodCIDR %v: set Config.LocalPodCIDR to this node's IPv4 PodCIDR, or leave it unset", cfg.LocalPodCIDR)
	}
	return checkLoadBalancing(cfg)
}

// objectNATPorts are the NAT ports a zero Config.NATPortMin and NATPortMax
// keep: the object's nat_port_min and nat_port_max (bpf/lib/config.h).
func objectNATPorts() (lo, hi uint16, err error) {
	spec, err := loadMyelin()
	if err != nil {
		return 0, 0, fmt.Errorf("load datapath spec: %w", err)
	}
	var specs myelinSpecs
	if err := spec.Assign(&specs); err != nil {
		return 0, 0, fmt.Errorf("assign datapath spec: %w", err)
	}
	if err := specs.NatPortMin.Get(&lo); err != nil {
		return 0, 0, fmt.Errorf("read nat_port_min: %w", err)
	}
	if err := specs.NatPortMax.Get(&hi); err != nil {
		return 0, 0, fmt.Errorf("read nat_port_max: %w", err)
	}
	return lo, hi, nil
}

// configure writes cfg into the spec's load-time constants and map sizes.
func configure(spec *ebpf.CollectionSpec, cfg Config) error {
	var specs myelinSpecs
	if err := spec.Assign(&specs); err != nil {
		return fmt.Errorf("assign datapath spec: %w", err)
	}
	var bpfRouting uint8
	if cfg.HostRouting == HostRoutingBPF {
		bpfRouting = 1
	}
	if err := specs.HostRoutingBpf.Set(bpfRouting); err != nil {
		return fmt.Errorf("set host_routing_bpf: %w", err)
	}
	if err := configureTunnel(&specs, cfg); err != nil {
		return err
	}
	var verify uint8 = 1
	if cfg.NoSourceVerification {
		verify = 0
	}
	if err := specs.SourceVerify.Set(verify); err != nil {
		return fmt.Errorf("set source_verify: %w", err)
	}
	if err := configureBudgets(&specs, cfg); err != nil {
		return err
	}
	if err := configureAddresses(&specs, cfg); err != nil {
		return err
	}
	if err := configureLoadBalancing(&specs, cfg); err != nil {
		return err
	}
	// A zero size keeps the object's own (bpf/lib/maps.h): there is no Go copy.
	if cfg.EndpointsMax != 0 {
		specs.MyelinEndpoints.MaxEntries = cfg.EndpointsMax
		specs.MyelinPolicyEps.MaxEntries = cfg.EndpointsMax
		specs.MyelinPolicyCtOver.MaxEntries = cfg.EndpointsMax
		specs.MyelinSnatOver.MaxEntries = cfg.EndpointsMax
		specs.MyelinLbCtOver.MaxEntries = cfg.EndpointsMax
	}
	if cfg.NATMax != 0 {
		specs.MyelinSnat.MaxEntries = cfg.NATMax
	}
	if cfg.PolicyCTMax != 0 {
		specs.MyelinPolicyCt.MaxEntries = policyCTBuckets(cfg.PolicyCTMax) + 1 // and the header
	}
	if err := specs.PolicyCtBuckets.Set(specs.MyelinPolicyCt.MaxEntries - 1); err != nil {
		return fmt.Errorf("set policy_ct_buckets: %w", err)
	}
	return nil
}

// configureBudgets writes which per-pod budgets are on (budget.go): off, the
// datapath reads no list.
func configureBudgets(specs *myelinSpecs, cfg Config) error {
	for _, b := range []struct {
		v    *ebpf.VariableSpec
		name string
		max  uint32
	}{
		{specs.PolicyCtBudget, "policy_ct_budget", cfg.PolicyCTPodMax},
		{specs.NatBudget, "nat_budget", cfg.NATPodMax},
		{specs.LbCtBudget, "lb_ct_budget", cfg.LBCTPodMax},
	} {
		var on uint8
		if b.max != 0 {
			on = 1
		}
		if err := b.v.Set(on); err != nil {
			return fmt.Errorf("set %s: %w", b.name, err)
		}
	}
	return nil
}

// ensurePinDir creates dir and checks that it is on bpffs.
func ensurePinDir(dir string) error {
	hint := "mount bpffs first: mount -t bpf bpf /sys/fs/bpf"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin dir %s: %w (%s)", dir, err, hint)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("stat pin dir %s: %w", dir, err)
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("check pin dir %s: not on bpffs: %s", dir, hint)
	}
	return nil
}

// SetTrace turns trace events (one per forwarded or passed packet) on or
// off at runtime. Every Load starts with tracing off.
func (d *Datapath) SetTrace(on bool) error {
	return setFlag(d.objs.TraceEnabled, "trace_enabled", on)
}

// SetDropEvents turns drop events (one per dropped packet) on or off at
// runtime; drop counters count either way. Every Load starts with them off:
// the agent turns them on while a monitor client wants drops.
func (d *Datapath) SetDropEvents(on bool) error {
	return setFlag(d.objs.DropEventsEnabled, "drop_events_enabled", on)
}

// setFlag writes 1 or 0 to a __u32 flag in the programs' .bss.
func setFlag(v *ebpf.Variable, name string, on bool) error {
	var val uint32
	if on {
		val = 1
	}
	if err := v.Set(val); err != nil {
		return fmt.Errorf("set %s: %w", name, err)
	}
	return nil
}

// Close releases the agent's file descriptors. Pinned maps and links stay,
// so the datapath keeps forwarding after the agent exits.
func (d *Datapath) Close() error {
	d.maglev.close()
	if err := d.objs.Close(); err != nil {
		return fmt.Errorf("close datapath: %w", err)
	}
	return nil
}

// Unpin removes everything under pinDir (maps and links) and pinDir itself,
// which detaches the programs once no one else holds them. Used when a node
// is torn down; no error if pinDir does not exist.
func Unpin(pinDir string) error {
	if pinDir == "" {
		return errors.New("unpin datapath: empty pin dir")
	}
	if err := os.RemoveAll(pinDir); err != nil {
		return fmt.Errorf("unpin %s: %w", pinDir, err)
	}
	return nil
}

// ReplacedMaps returns the pinned maps Load replaced because their size or
// layout no longer matched (a changed table size or an upgrade): what they held is
// gone unless their layout is unchanged: then they were copied (Carried).
func (d *Datapath) ReplacedMaps() []MapReplacement { return d.replaced }
