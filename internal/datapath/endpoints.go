package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// EndpointInfo is what the datapath knows about one local pod.
type EndpointInfo struct {
	// IfIndex is the pod's host-side veth in the node netns.
	IfIndex int
	// PodMAC is the MAC of eth0 inside the pod: the destination of delivered frames.
	PodMAC net.HardwareAddr
	// HostMAC is the MAC of the host-side veth: the source of delivered frames.
	HostMAC net.HardwareAddr
	// ID is the agent's endpoint id.
	ID uint16
}

// UpsertEndpoint creates or replaces the endpoint of the pod IPv4 address
// ip, with the NetworkPolicy isolation flags myelin_policy_eps holds for ip
// (SetPolicyFlags). It fails with ebpf.ErrMapFull wrapped when the endpoints
// map is full (raise Config.EndpointsMax).
func (d *Datapath) UpsertEndpoint(ip netip.Addr, ep EndpointInfo) error {
	key, err := endpointKey(ip)
	if err != nil {
		return fmt.Errorf("upsert endpoint: %w", err)
	}
	value, err := endpointValue(ep)
	if err != nil {
		return fmt.Errorf("upsert endpoint %s: %w", ip, err)
	}
	d.policyMu.Lock()
	defer d.policyMu.Unlock()
	flags, err := d.policyFlagsOf(key)
	if err != nil {
		return fmt.Errorf("upsert endpoint %s: %w", ip, err)
	}
	value.Flags = uint32(flags)
	if err := d.objs.MyelinEndpoints.Update(key, value, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("upsert endpoint %s: %w", ip, err)
	}
	return nil
}

// DeleteEndpoint removes the endpoint of ip and its NetworkPolicy isolation
// flags; no error if there is none.
func (d *Datapath) DeleteEndpoint(ip netip.Addr) error {
	key, err := endpointKey(ip)
	if err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	err = d.objs.MyelinEndpoints.Delete(key)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete endpoint %s: %w", ip, err)
	}
	// The next pod with this address starts not isolated, until the
	// policy loop writes its own state (docs/policy.md).
	return d.SetPolicyFlags(ip, 0)
}

// Endpoints returns every endpoint in the map, keyed by pod IPv4 address.
func (d *Datapath) Endpoints() (map[netip.Addr]EndpointInfo, error) {
	var (
		key   [4]byte
		value myelinEndpointInfo
	)
	out := make(map[netip.Addr]EndpointInfo)
	it := d.objs.MyelinEndpoints.Iterate()
	for it.Next(&key, &value) {
		out[netip.AddrFrom4(key)] = EndpointInfo{
			IfIndex: int(value.Ifindex),
			PodMAC:  net.HardwareAddr(append([]byte(nil), value.PodMac[:]...)),
			HostMAC: net.HardwareAddr(append([]byte(nil), value.HostMac[:]...)),
			ID:      value.EndpointId,
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	return out, nil
}

// endpointKey is the map key of ip: its four bytes, network order.
func endpointKey(ip netip.Addr) ([4]byte, error) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return [4]byte{}, fmt.Errorf("address %s is not IPv4", ip)
	}
	return ip.As4(), nil
}

// endpointValue converts ep to its map value.
func endpointValue(ep EndpointInfo) (myelinEndpointInfo, error) {
	var v myelinEndpointInfo
	if ep.IfIndex <= 0 || ep.IfIndex > 1<<31-1 {
		return v, fmt.Errorf("invalid ifindex %d", ep.IfIndex)
	}
	if len(ep.PodMAC) != len(v.PodMac) {
		return v, fmt.Errorf("pod MAC %q is not a 6-byte Ethernet address", ep.PodMAC)
	}
	if len(ep.HostMAC) != len(v.HostMac) {
		return v, fmt.Errorf("host MAC %q is not a 6-byte Ethernet address", ep.HostMAC)
	}
	v.Ifindex = uint32(ep.IfIndex)
	copy(v.PodMac[:], ep.PodMAC)
	copy(v.HostMac[:], ep.HostMAC)
	v.EndpointId = ep.ID
	return v, nil
}
