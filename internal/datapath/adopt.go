package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// OpenPinned opens the maps a previous Load pinned in pinDir, and nothing
// else: no programs are loaded, nothing is attached or changed. The result
// serves the map maintenance methods (GCNAT, NATEntries, MapFill, Metrics)
// while the agent cannot Load yet, for example while the apiserver that
// holds its configuration is unreachable; the programs a previous agent
// attached keep forwarding with these same maps meanwhile. It must not be
// used to attach or to write endpoints or services. Close it once Load has
// returned a Datapath (which may have replaced a map whose shape changed).
//
// It fails, wrapping os.ErrNotExist, when pinDir holds no pinned map of this
// build (a node's first start), and when a pinned map has another key or
// value layout than this build's (an upgrade: wait for Load).
func OpenPinned(pinDir string) (*Datapath, error) {
	spec, err := loadMyelin()
	if err != nil {
		return nil, fmt.Errorf("load datapath spec: %w", err)
	}
	coll := &ebpf.Collection{Maps: map[string]*ebpf.Map{}}
	defer coll.Close() // what Assign did not take
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		path := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) && optionalPins[name] {
			m, err = privateCopy(ms)
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		coll.Maps[name] = m
		if m.KeySize() != ms.KeySize || m.ValueSize() != ms.ValueSize || m.Type() != ms.Type {
			return nil, fmt.Errorf("open pinned map %s: its layout is not this build's (an upgrade); Load replaces it", path)
		}
	}
	d := &Datapath{cfg: Config{PinDir: pinDir}}
	if err := coll.Assign(&d.objs.myelinMaps); err != nil {
		return nil, fmt.Errorf("adopt pinned maps in %s: %w", pinDir, err)
	}
	// The budgets the last Load configured: the GC applies them before this agent
	// has its configuration (the programs that run read myelin_budgets too).
	d.cfg.PolicyCTPodMax, d.cfg.NATPodMax, d.cfg.LBCTPodMax = pinnedBudgets(d.objs.MyelinBudgets)
	// The policy table is read and written through its mapping (GCPolicyCT),
	// hashed with the seed its header keeps.
	if err := d.withPolicyCT(func(t *policyCTTable) error { d.policyCTSeed = *t.seed(); return nil }); err != nil {
		d.Close()
		return nil, fmt.Errorf("adopt pinned maps in %s: %w", pinDir, err)
	}
	return d, nil
}

// optionalPins are the maps an adopted datapath does without when they are not
// pinned: the socket programs' reverse maps, which Load pins only with
// Config.SocketLB (configureLoadBalancing), and those a node upgraded from a build
// without them has not pinned yet (its GC never reads them): myelin_lb_nodeports,
// myelin_flow_drops, the budgets' lists and state (without myelin_budgets an
// adopted datapath has no budget), myelin_policy_ct_stats (its evictions then read
// as an error until the load), myelin_tunnel_nodes.
var optionalPins = map[string]bool{"myelin_lb_sock_rev": true, "myelin_lb_sock_peer": true, "myelin_lb_nodeports": true,
	"myelin_flow_drops": true, "myelin_policy_ct_over": true, "myelin_snat_over": true,
	"myelin_lb_ct_over": true, "myelin_policy_ct_stats": true, "myelin_tunnel_nodes": true, "myelin_budgets": true}

// privateStub makes ms an unpinned map of one entry (socket storage has no size:
// it holds nothing until a program stores into a socket; a ring buffer keeps its
// size, a power of two of pages): what a load without socket-LB holds of its
// reverse maps (configureLoadBalancing).
func privateStub(ms *ebpf.MapSpec) {
	ms.Pinning = ebpf.PinNone
	if ms.Type != ebpf.SkStorage && ms.Type != ebpf.RingBuf {
		ms.MaxEntries = 1
	}
}

// privateCopy creates a privateStub of spec: what an adopted datapath holds for an
// optional map its node never pinned.
func privateCopy(spec *ebpf.MapSpec) (*ebpf.Map, error) {
	cp := spec.Copy()
	privateStub(cp)
	return ebpf.NewMap(cp)
}

// Endpoint returns the endpoints map entry of ip, and false if there is none.
func (d *Datapath) Endpoint(ip netip.Addr) (EndpointInfo, bool, error) {
	key, err := endpointKey(ip)
	if err != nil {
		return EndpointInfo{}, false, fmt.Errorf("look up endpoint: %w", err)
	}
	var v myelinEndpointInfo
	err = d.objs.MyelinEndpoints.Lookup(key, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return EndpointInfo{}, false, nil
	}
	if err != nil {
		return EndpointInfo{}, false, fmt.Errorf("look up endpoint %s: %w", ip, err)
	}
	return EndpointInfo{IfIndex: int(v.Ifindex), PodMAC: append([]byte(nil), v.PodMac[:]...),
		HostMAC: append([]byte(nil), v.HostMac[:]...), ID: v.EndpointId}, true, nil
}

// ErrEndpointNotOwned is returned by DeleteEndpointOf when the entry of the
// address points at another veth than the caller's.
var ErrEndpointNotOwned = errors.New("the endpoints map entry belongs to another veth")

// DeleteEndpointOf removes the endpoints map entry of ip only if it points
// at ifindex, the host veth of the endpoint being deleted, so deleting a
// stale endpoint never removes the entry of another pod that has the address
// now: that fails with ErrEndpointNotOwned and leaves the entry. No error if
// there is no entry.
func (d *Datapath) DeleteEndpointOf(ip netip.Addr, ifindex int) error {
	cur, ok, err := d.Endpoint(ip)
	if err != nil || !ok {
		return err
	}
	if cur.IfIndex != ifindex {
		return fmt.Errorf("delete endpoint %s of ifindex %d: it points at ifindex %d: %w", ip, ifindex, cur.IfIndex, ErrEndpointNotOwned)
	}
	return d.DeleteEndpoint(ip)
}

// EndpointProgramsAttached reports, for the host veth ifindex, whether this
// datapath's myelin_from_pod is attached to its ingress and myelin_to_pod to
// its egress (the cls_bpf filters AttachEndpoint adds).
func (d *Datapath) EndpointProgramsAttached(ifindex int) (fromPod, toPod bool, err error) {
	fromPod, err = clsBPFAttached(d.objs.MyelinFromPod, ifindex, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return false, false, err
	}
	toPod, err = clsBPFAttached(d.objs.MyelinToPod, ifindex, netlink.HANDLE_MIN_EGRESS)
	return fromPod, toPod, err
}
