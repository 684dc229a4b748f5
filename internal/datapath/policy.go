package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// PolicyFlags is the isolation state of one local pod (myelin_policy_eps).
type PolicyFlags uint8

// The bits of PolicyFlags (enum policy_flags in bpf/lib/types.h).
const (
	PolicyIngress           = PolicyFlags(myelinPolicyFlagsPOLICY_F_INGRESS)
	PolicyEgress            = PolicyFlags(myelinPolicyFlagsPOLICY_F_EGRESS)
	PolicyIngressIncomplete = PolicyFlags(myelinPolicyFlagsPOLICY_F_INGRESS_INCOMPLETE)
	PolicyEgressIncomplete  = PolicyFlags(myelinPolicyFlagsPOLICY_F_EGRESS_INCOMPLETE)
)

// PolicyPortsMax is how many port ranges one policy entry holds.
const PolicyPortsMax = len(myelinPolicyValue{}.Ports)

// IPCacheMax is how many prefixes myelin_ipcache holds (IPCACHE_MAX in
// bpf/lib/maps.h; TestIPCacheMax keeps the two equal): every pod /32 of the
// cluster and the policies' CIDRs share it.
const IPCacheMax = 65536

// PolicyMax is how many entries myelin_policy holds (POLICY_MAX in bpf/lib/maps.h;
// TestIPCacheMax keeps the two equal): every isolated pod of the node shares it.
const PolicyMax = 65536

// Reserved peer identities of myelin_policy.
const (
	// IdentityAny is the identity of an entry that allows every peer.
	IdentityAny uint32 = 0
	// IdentityWorld is what an address myelin_ipcache does not cover is.
	IdentityWorld uint32 = 2
)

// ErrPolicyPorts says an entry has more port ranges than the datapath holds.
var ErrPolicyPorts = fmt.Errorf("more than %d port ranges for one peer", PolicyPortsMax)

// PolicyPort is one allowed range: Proto 0 allows every protocol and port;
// Lo 0 and Hi 65535 every port of Proto.
type PolicyPort struct {
	Proto  uint8
	Lo, Hi uint16
}

// PolicyKey names one entry: what the local pod Endpoint allows to
// (Egress) or from a peer Identity.
type PolicyKey struct {
	Endpoint netip.Addr
	Identity uint32
	Egress   bool
}

func policyKey(k PolicyKey) (myelinPolicyKey, error) {
	a, err := endpointKey(k.Endpoint)
	if err != nil {
		return myelinPolicyKey{}, err
	}
	key := myelinPolicyKey{EpAddr: addrU32(a), Identity: k.Identity}
	if k.Egress {
		key.Dir = uint8(myelinPolicyDirPOLICY_DIR_EGRESS)
	}
	return key, nil
}

// addrU32 is the map representation of a network-order IPv4 address.
func addrU32(a [4]byte) uint32 {
	return uint32(a[0]) | uint32(a[1])<<8 | uint32(a[2])<<16 | uint32(a[3])<<24
}

func u32Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

// SetPolicy writes the allowed ports of k (replacing them atomically). More
// than PolicyPortsMax ranges fail with ErrPolicyPorts and write nothing; a
// full map fails with ebpf.ErrMapFull wrapped.
func (d *Datapath) SetPolicy(k PolicyKey, ports []PolicyPort) error {
	key, err := policyKey(k)
	if err != nil {
		return fmt.Errorf("set policy: %w", err)
	}
	if len(ports) > PolicyPortsMax {
		return fmt.Errorf("set policy of %s for identity %d: %w", k.Endpoint, k.Identity, ErrPolicyPorts)
	}
	var v myelinPolicyValue
	v.Count = uint8(len(ports))
	for i, p := range ports {
		v.Ports[i] = myelinPolicyPort{Proto: p.Proto, Lo: p.Lo, Hi: p.Hi}
	}
	if err := d.objs.MyelinPolicy.Update(key, v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set policy of %s for identity %d: %w", k.Endpoint, k.Identity, err)
	}
	return nil
}

// DeletePolicy removes the entry k; no error if there is none.
func (d *Datapath) DeletePolicy(k PolicyKey) error {
	key, err := policyKey(k)
	if err != nil {
		return fmt.Errorf("delete policy: %w", err)
	}
	if err := d.objs.MyelinPolicy.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete policy of %s for identity %d: %w", k.Endpoint, k.Identity, err)
	}
	return nil
}

// Policies returns every entry of myelin_policy.
func (d *Datapath) Policies() (map[PolicyKey][]PolicyPort, error) {
	var (
		key myelinPolicyKey
		v   myelinPolicyValue
	)
	out := make(map[PolicyKey][]PolicyPort)
	it := d.objs.MyelinPolicy.Iterate()
	for it.Next(&key, &v) {
		k := PolicyKey{Endpoint: u32Addr(key.EpAddr), Identity: key.Identity,
			Egress: key.Dir == uint8(myelinPolicyDirPOLICY_DIR_EGRESS)}
		ports := make([]PolicyPort, 0, v.Count)
		for i := 0; i < int(v.Count) && i < PolicyPortsMax; i++ {
			ports = append(ports, PolicyPort{Proto: v.Ports[i].Proto, Lo: v.Ports[i].Lo, Hi: v.Ports[i].Hi})
		}
		out[k] = ports
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return out, nil
}

// SetPolicyFlags writes the isolation state of local pod ip; flags 0
// removes it (not isolated). The flags go to myelin_policy_eps and into the
// pod's myelin_endpoints entry if it has one (the datapath reads them there
// first); UpsertEndpoint carries them into a new entry. When the endpoint's
// copy can't be written, myelin_policy_eps is put back as it was, so
// PolicyFlagsAll never reports flags the programs don't enforce.
func (d *Datapath) SetPolicyFlags(ip netip.Addr, flags PolicyFlags) error {
	key, err := endpointKey(ip)
	if err != nil {
		return fmt.Errorf("set policy flags: %w", err)
	}
	d.policyMu.Lock()
	defer d.policyMu.Unlock()
	prev, err := d.policyFlagsOf(key)
	if err != nil {
		return fmt.Errorf("set policy flags of %s: %w", ip, err)
	}
	if err := d.setPolicyEps(key, ip, flags); err != nil {
		return err
	}
	if err := d.mirrorPolicyFlags(key, ip, flags); err != nil {
		// The programs read the endpoint's copy. Put myelin_policy_eps back, so
		// the next apply, which compares with it, sees the difference and
		// writes again instead of taking the flags for set.
		if rerr := d.setPolicyEps(key, ip, prev); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return nil
}

// restorePolicyFlags writes into myelin_policy_eps the isolation flags of every
// endpoint that holds some there is no entry for. Load calls it: an upgrade that
// replaced myelin_policy_eps empty (a layout it could not convert) while the
// endpoints map kept its entries would otherwise open every isolated pod, since
// UpsertEndpoint, which the agent's restore calls for each, takes the flags from
// myelin_policy_eps. The same mends an agent that died inside SetPolicyFlags(ip,
// 0). Either way the pod stays isolated (fail closed) until the policy loop
// writes what applies now.
func (d *Datapath) restorePolicyFlags() error {
	d.policyMu.Lock()
	defer d.policyMu.Unlock()
	held := map[[4]byte]PolicyFlags{}
	err := dumpEntries(d.objs.MyelinEndpoints, func(key [4]byte, v myelinEndpointInfo) {
		if v.Flags != 0 {
			held[key] = PolicyFlags(v.Flags)
		}
	})
	if err != nil {
		return fmt.Errorf("restore policy flags from the endpoints: %w", err)
	}
	for key, flags := range held {
		cur, err := d.policyFlagsOf(key) // 0: no entry (setPolicyEps never writes 0)
		if err != nil {
			return fmt.Errorf("restore policy flags: %w", err)
		}
		if cur != 0 {
			continue
		}
		if err := d.setPolicyEps(key, netip.AddrFrom4(key), flags); err != nil {
			return fmt.Errorf("restore policy flags: %w", err)
		}
	}
	return nil
}

// mirrorPolicyFlags writes flags into the endpoint entry of key, if any.
func (d *Datapath) mirrorPolicyFlags(key [4]byte, ip netip.Addr, flags PolicyFlags) error {
	var v myelinEndpointInfo
	if err := d.objs.MyelinEndpoints.Lookup(key, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("set policy flags of %s: read endpoint: %w", ip, err)
	}
	if v.Flags == uint32(flags) {
		return nil
	}
	v.Flags = uint32(flags)
	if err := d.objs.MyelinEndpoints.Update(key, v, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("set policy flags of %s in its endpoint: %w", ip, err)
	}
	return nil
}

// policyFlagsOf returns the isolation flags myelin_policy_eps holds for key.
func (d *Datapath) policyFlagsOf(key [4]byte) (PolicyFlags, error) {
	var v myelinPolicyEp
	err := d.objs.MyelinPolicyEps.Lookup(key, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read policy flags: %w", err)
	}
	return PolicyFlags(v.Flags), nil
}

// setPolicyEps writes flags into myelin_policy_eps (0: removes the entry).
func (d *Datapath) setPolicyEps(key [4]byte, ip netip.Addr, flags PolicyFlags) error {
	var err error
	if flags == 0 {
		err = d.objs.MyelinPolicyEps.Delete(key)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear policy flags of %s: %w", ip, err)
		}
		return nil
	}
	if err := d.objs.MyelinPolicyEps.Update(key, myelinPolicyEp{Flags: uint8(flags)}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set policy flags of %s: %w", ip, err)
	}
	return nil
}

// PolicyFlagsAll returns the isolation state of every isolated local pod.
func (d *Datapath) PolicyFlagsAll() (map[netip.Addr]PolicyFlags, error) {
	var (
		key [4]byte
		v   myelinPolicyEp
	)
	out := make(map[netip.Addr]PolicyFlags)
	it := d.objs.MyelinPolicyEps.Iterate()
	for it.Next(&key, &v) {
		out[netip.AddrFrom4(key)] = PolicyFlags(v.Flags)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list policy flags: %w", err)
	}
	return out, nil
}

func ipcacheKey(p netip.Prefix) (myelinIpcacheKey, error) {
	if !p.Addr().Is4() {
		return myelinIpcacheKey{}, fmt.Errorf("prefix %s is not IPv4", p)
	}
	p = p.Masked()
	return myelinIpcacheKey{Prefixlen: uint32(p.Bits()), Addr: addrU32(p.Addr().As4())}, nil
}

// SetIPCache maps prefix (a pod /32 or a policy CIDR) to a peer identity.
func (d *Datapath) SetIPCache(prefix netip.Prefix, identity uint32) error {
	key, err := ipcacheKey(prefix)
	if err != nil {
		return fmt.Errorf("set ipcache: %w", err)
	}
	if err := d.objs.MyelinIpcache.Update(key, myelinIpcacheValue{Identity: identity}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set ipcache %s: %w", prefix, err)
	}
	return nil
}

// DeleteIPCache removes prefix; no error if it is not there.
func (d *Datapath) DeleteIPCache(prefix netip.Prefix) error {
	key, err := ipcacheKey(prefix)
	if err != nil {
		return fmt.Errorf("delete ipcache: %w", err)
	}
	if err := d.objs.MyelinIpcache.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete ipcache %s: %w", prefix, err)
	}
	return nil
}

// IPCache returns every prefix of myelin_ipcache and its identity.
func (d *Datapath) IPCache() (map[netip.Prefix]uint32, error) {
	var (
		key myelinIpcacheKey
		v   myelinIpcacheValue
	)
	out := make(map[netip.Prefix]uint32)
	it := d.objs.MyelinIpcache.Iterate()
	for it.Next(&key, &v) {
		out[netip.PrefixFrom(u32Addr(key.Addr), int(key.Prefixlen))] = v.Identity
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list ipcache: %w", err)
	}
	return out, nil
}
