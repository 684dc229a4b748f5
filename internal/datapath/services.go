package datapath

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrLoadBalancingOff is returned by UpsertService and UpsertBackend of a
// datapath loaded without Config.LoadBalancing.
var ErrLoadBalancingOff = errors.New("load balancing is off: load the datapath with Config.LoadBalancing")

// Frontend is the address a service is reached at: a ClusterIP and port, or
// this node's IP and a NodePort (with ServiceNodePort).
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto uint8 // unix.IPPROTO_TCP or unix.IPPROTO_UDP
}

// String returns addr:port/proto, e.g. "10.96.0.10:53/udp".
func (f Frontend) String() string {
	proto := fmt.Sprintf("proto-%d", f.Proto)
	switch f.Proto {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(f.Addr, f.Port), proto)
}

// Backend is a pod IP and targetPort; its protocol is its frontends'.
type Backend struct {
	Addr netip.Addr
	Port uint16
}

// String returns addr:port, the backend's name (in the Maglev table, for one).
func (b Backend) String() string { return netip.AddrPortFrom(b.Addr, b.Port).String() }

// ServiceFlags modify how a service is served.
type ServiceFlags uint8

const (
	// ServiceNodePort: the frontend is this node's IP and a NodePort,
	// served on the uplink (AttachNetdev) as well as from pods. A backend
	// on another node gets the request with the node IP as its source (as
	// kube-proxy does); a local backend sees the client's address.
	ServiceNodePort ServiceFlags = 1 << iota
	// ServiceAffinity is sessionAffinity ClientIP: a client keeps its
	// backend for Service.AffinityTimeout since its last new connection,
	// as long as that backend stays among the service's Backends.
	ServiceAffinity
	// ServiceExternalLocal is externalTrafficPolicy Local (on a NodePort
	// frontend): clients from outside the node choose among the first
	// Service.LocalBackends of Backends only, this node's own, by the Maglev
	// table when there is one; the node's pods and processes choose among
	// all Backends at random, as kube-proxy short-circuits local traffic.
	// (The datapath keeps bit 4 for itself: the service has a Maglev table.)
	ServiceExternalLocal ServiceFlags = 8
	// ServiceExternalIP: the frontend is one of spec.externalIPs. With
	// socket-LB, the node's own sockets to it are left alone when it has no
	// ready backend (a ClusterIP's are refused: nothing else would stop them
	// from leaving the node), as kube-proxy leaves them.
	ServiceExternalIP ServiceFlags = 16
)

// serviceFlagsKnown are the ServiceFlags Service.Flags may hold.
const serviceFlagsKnown = ServiceNodePort | ServiceAffinity | ServiceExternalLocal | ServiceExternalIP

// Service is what a frontend is translated to.
type Service struct {
	// ID is agent-assigned, >= 1, unique per frontend and stable while the
	// frontend exists.
	ID    uint32
	Flags ServiceFlags
	// AffinityTimeout is the stickiness of ServiceAffinity, rounded up to
	// whole seconds.
	AffinityTimeout time.Duration
	// Backends are the ids of the selectable (ready) backends (see
	// UpsertBackend), in slot order. Empty: new connections are rejected
	// with ICMP port unreachable; established ones stay on their backend
	// while it exists.
	Backends []uint32
	// LocalBackends, with ServiceExternalLocal, is how many of Backends,
	// first, are this node's: the pool of clients from outside the node.
	LocalBackends int
	// Maglev is the service's Maglev lookup table, computed by the agent:
	// nil for random selection (lb-algorithm random), else
	// Config.MaglevTableSize backend ids, each one of Backends (of the
	// first LocalBackends with ServiceExternalLocal). Ignored when Backends
	// is empty. Services reads it back as nil.
	Maglev []uint32
}

// ServiceEntry is one service as the datapath holds it.
type ServiceEntry struct {
	Frontend
	Service
	// HasMaglev says whether the service selects by a Maglev table.
	HasMaglev bool
}

// UpsertBackend creates or replaces backend id (>= 1). Backends are shared
// by every service that lists their id. Requires Config.LoadBalancing.
func (d *Datapath) UpsertBackend(id uint32, b Backend) error {
	if !d.cfg.LoadBalancing {
		return fmt.Errorf("upsert backend %d: %w", id, ErrLoadBalancingOff)
	}
	if id == 0 {
		return fmt.Errorf("upsert backend %v: id 0: backend ids start at 1", b)
	}
	if !b.Addr.Unmap().Is4() || b.Port == 0 {
		return fmt.Errorf("upsert backend %d: %v:%d is not an IPv4 address and port", id, b.Addr, b.Port)
	}
	value := myelinLbBackend{Addr: networkUint32(b.Addr), Port: htons(b.Port)}
	// Before any flow can reach the backend: its replies' port must be marked.
	if err := d.backendPorts.mark(value.Port); err != nil {
		return fmt.Errorf("upsert backend %d: %w", id, err)
	}
	if err := d.objs.MyelinLbBackends.Update(id, value, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("upsert backend %d: %w", id, err)
	}
	return nil
}

// DeleteBackend removes backend id; no error if there is none. Flows on it
// pick a backend again with their next packet.
func (d *Datapath) DeleteBackend(id uint32) error {
	if err := d.objs.MyelinLbBackends.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete backend %d: %w", id, err)
	}
	return nil
}

// Backends returns every backend by id.
func (d *Datapath) Backends() (map[uint32]Backend, error) {
	var (
		id uint32
		v  myelinLbBackend
	)
	out := make(map[uint32]Backend)
	it := d.objs.MyelinLbBackends.Iterate()
	for it.Next(&id, &v) {
		out[id] = Backend{Addr: addrFromNetwork(v.Addr), Port: ntohs(v.Port)}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return out, nil
}

// ServiceCapacity returns how many frontends (myelin_lb_services) and backend
// slots (myelin_lb_slots: one per backend of every frontend, all Services
// together) the loaded Service maps hold; 1 each without Config.LoadBalancing.
func (d *Datapath) ServiceCapacity() (frontends, slots int) {
	return int(d.objs.MyelinLbServices.MaxEntries()), int(d.objs.MyelinLbSlots.MaxEntries())
}

// UpsertService creates or replaces the service of fe, in an order that
// never lets a packet see a half-written service: the new slots and Maglev
// table first, then the service entry, then the slots beyond the new
// count. A few syscalls whatever the size: slots are written in one batch,
// and a Maglev table whose content another service already has is shared
// with it (one inner map per distinct table). Requires Config.LoadBalancing.
func (d *Datapath) UpsertService(fe Frontend, s Service) error {
	if !d.cfg.LoadBalancing {
		return fmt.Errorf("upsert service %v: %w", fe, ErrLoadBalancingOff)
	}
	key, err := serviceKey(fe)
	if err != nil {
		return fmt.Errorf("upsert service: %w", err)
	}
	var tableHash [sha256.Size]byte // of s.Maglev, once: admits and attach both need it
	if s.Maglev != nil && len(s.Backends) > 0 {
		tableHash = hashTable(s.Maglev)
	}
	if len(s.Backends) == 0 || (s.Maglev != nil && !d.maglev.admits(s.ID, tableHash, len(s.Maglev))) {
		s.Maglev = nil // no backend, or past maglevTablesBytes: random selection
	}
	if slots := d.objs.MyelinLbSlots.MaxEntries(); uint64(len(s.Backends)) > uint64(slots) {
		return fmt.Errorf("upsert service %v: %d backends, at most %d fit (myelin_lb_slots)", fe, len(s.Backends), slots)
	}
	value, err := serviceValue(s, d.cfg.MaglevTableSize)
	if err != nil {
		return fmt.Errorf("upsert service %v: %w", fe, err)
	}
	// Before a packet to the node's IP can be looked up for it: its port must be marked.
	if s.Flags&ServiceNodePort != 0 {
		if err := d.nodePorts.mark(key.Port); err != nil {
			return fmt.Errorf("upsert service %v: %w", fe, err)
		}
	}
	d.lbMu.Lock()
	defer d.lbMu.Unlock()
	var old myelinLbSvc
	if err := d.objs.MyelinLbServices.Lookup(key, &old); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("upsert service %v: read current: %w", fe, err)
	}
	if err := d.writeService(key, value, s, tableHash); err != nil {
		return fmt.Errorf("upsert service %v: %w", fe, err)
	}
	if err := d.cleanupService(old, s.ID, uint32(len(s.Backends))); err != nil {
		return fmt.Errorf("upsert service %v: %w", fe, err)
	}
	return nil
}

// writeService writes the slots, the Maglev table (its hashTable: tableHash) and
// the entry of s.
func (d *Datapath) writeService(key myelinLbSvcKey, value myelinLbSvc, s Service, tableHash [sha256.Size]byte) error {
	if err := d.writeSlots(s.ID, s.Backends); err != nil {
		return err
	}
	if s.Maglev != nil {
		if err := d.maglev.attach(d.objs.MyelinLbMaglev, s.ID, s.Maglev, tableHash); err != nil {
			return err
		}
	}
	if err := d.objs.MyelinLbServices.Update(key, value, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write service entry: %w", err)
	}
	if s.Maglev == nil {
		return d.maglev.detach(d.objs.MyelinLbMaglev, s.ID)
	}
	return nil
}

// cleanupService removes what the replaced entry old had beyond the new
// service id with count slots: its extra slots, or everything of an old id.
func (d *Datapath) cleanupService(old myelinLbSvc, id, count uint32) error {
	if old.Id == 0 {
		return nil
	}
	if old.Id == id {
		return d.deleteSlots(id, count, old.Count)
	}
	if err := d.deleteSlots(old.Id, 0, old.Count); err != nil {
		return err
	}
	return d.maglev.detach(d.objs.MyelinLbMaglev, old.Id)
}

// DeleteService removes the service of fe: its entry first (no new flow
// selects it any more), then its slots and its Maglev table. Affinity
// entries are left to the LRU. No error if there is none.
func (d *Datapath) DeleteService(fe Frontend) error {
	key, err := serviceKey(fe)
	if err != nil {
		return fmt.Errorf("delete service: %w", err)
	}
	d.lbMu.Lock()
	defer d.lbMu.Unlock()
	var old myelinLbSvc
	err = d.objs.MyelinLbServices.Lookup(key, &old)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete service %v: %w", fe, err)
	}
	if err := d.objs.MyelinLbServices.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete service %v: %w", fe, err)
	}
	if err := d.cleanupService(old, 0, 0); err != nil {
		return fmt.Errorf("delete service %v: %w", fe, err)
	}
	return nil
}

// Services returns every service, ordered by frontend, with its backends
// in slot order; Maglev is nil (HasMaglev says whether there is a table).
func (d *Datapath) Services() ([]ServiceEntry, error) {
	if out, err := d.servicesBatch(); !errors.Is(err, ebpf.ErrNotSupported) {
		return out, err
	}
	var (
		k   myelinLbSvcKey
		v   myelinLbSvc
		out []ServiceEntry
	)
	it := d.objs.MyelinLbServices.Iterate()
	for it.Next(&k, &v) {
		out = append(out, serviceEntry(k, v))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	for i := range out {
		if err := d.readSlots(&out[i]); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b ServiceEntry) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	return out, nil
}

// readSlots fills e.Backends from its slots, one lookup each.
func (d *Datapath) readSlots(e *ServiceEntry) error {
	var count myelinLbSvc
	key, _ := serviceKey(e.Frontend)
	if err := d.objs.MyelinLbServices.Lookup(key, &count); err != nil {
		return fmt.Errorf("list services: %v: %w", e.Frontend, err)
	}
	for slot := uint32(0); slot < count.Count; slot++ {
		var id uint32
		if err := d.objs.MyelinLbSlots.Lookup(myelinLbSlotKey{SvcId: e.ID, Slot: slot}, &id); err != nil {
			return fmt.Errorf("list services: %v slot %d: %w", e.Frontend, slot, err)
		}
		e.Backends = append(e.Backends, id)
	}
	return nil
}

// writeSlots writes slots 0..len(ids)-1 of service id in one batch.
func (d *Datapath) writeSlots(id uint32, ids []uint32) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]myelinLbSlotKey, len(ids))
	for i := range keys {
		keys[i] = myelinLbSlotKey{SvcId: id, Slot: uint32(i)}
	}
	if _, err := d.objs.MyelinLbSlots.BatchUpdate(keys, ids, nil); err != nil {
		return fmt.Errorf("write %d slots of service id %d: %w", len(ids), id, err)
	}
	return nil
}

// deleteSlots deletes slots from..to-1 of service id, in one batch unless
// some are already gone.
func (d *Datapath) deleteSlots(id, from, to uint32) error {
	if from >= to {
		return nil
	}
	keys := make([]myelinLbSlotKey, 0, to-from)
	for slot := from; slot < to; slot++ {
		keys = append(keys, myelinLbSlotKey{SvcId: id, Slot: slot})
	}
	_, err := d.objs.MyelinLbSlots.BatchDelete(keys, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete slots %d-%d of service id %d: %w", from, to-1, id, err)
	}
	// The batch stops at the first missing key: delete the rest one by one.
	for _, k := range keys {
		if err := d.objs.MyelinLbSlots.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete slot %d of service id %d: %w", k.Slot, id, err)
		}
	}
	return nil
}

// serviceKey is the map key of fe.
func serviceKey(fe Frontend) (myelinLbSvcKey, error) {
	if !fe.Addr.Unmap().Is4() {
		return myelinLbSvcKey{}, fmt.Errorf("frontend %v: address is not IPv4", fe)
	}
	if fe.Proto != unix.IPPROTO_TCP && fe.Proto != unix.IPPROTO_UDP {
		return myelinLbSvcKey{}, fmt.Errorf("frontend %v: protocol must be TCP (6) or UDP (17)", fe)
	}
	if fe.Port == 0 {
		return myelinLbSvcKey{}, fmt.Errorf("frontend %v: port 0", fe)
	}
	return myelinLbSvcKey{Addr: networkUint32(fe.Addr), Port: htons(fe.Port), Proto: fe.Proto}, nil
}

// serviceValue validates s against a Maglev table size and converts it to
// its map value.
func serviceValue(s Service, maglevSize uint32) (myelinLbSvc, error) {
	v := myelinLbSvc{Id: s.ID, Count: uint32(len(s.Backends)), Flags: uint8(s.Flags)}
	if s.ID == 0 {
		return v, errors.New("service id 0: service ids start at 1")
	}
	if s.Flags&^serviceFlagsKnown != 0 {
		return v, fmt.Errorf("unknown service flags %#x", uint8(s.Flags))
	}
	switch {
	case s.Flags&ServiceExternalLocal == 0 && s.LocalBackends != 0:
		return v, fmt.Errorf("%d local backends without ServiceExternalLocal: only externalTrafficPolicy Local has a pool of its own", s.LocalBackends)
	case s.LocalBackends < 0 || s.LocalBackends > len(s.Backends) || s.LocalBackends > math.MaxUint16:
		return v, fmt.Errorf("%d local backends of %d: want 0 to %d", s.LocalBackends, len(s.Backends), min(len(s.Backends), math.MaxUint16))
	}
	v.LocalCount = uint16(s.LocalBackends)
	if slices.Contains(s.Backends, 0) {
		return v, errors.New("backend id 0 in Backends: backend ids start at 1")
	}
	if s.Flags&ServiceAffinity != 0 {
		secs := (s.AffinityTimeout + time.Second - 1) / time.Second
		if secs <= 0 || secs > math.MaxUint32 {
			return v, fmt.Errorf("affinity timeout %v: want 1s to %d s", s.AffinityTimeout, uint32(math.MaxUint32))
		}
		v.AffinityTimeout = uint32(secs)
	}
	if s.Maglev != nil {
		if err := checkMaglevTable(s, maglevSize); err != nil {
			return v, err
		}
		v.Flags |= uint8(myelinLbSvcFlagsLB_SVC_F_MAGLEV)
	}
	return v, nil
}

// checkMaglevTable checks that s.Maglev has the configured size and only
// ids of s.Backends (of its first LocalBackends with ServiceExternalLocal).
func checkMaglevTable(s Service, size uint32) error {
	if size == 0 {
		return errors.New("Maglev table given, but the datapath was loaded with Config.MaglevTableSize 0 (random selection)")
	}
	if len(s.Maglev) != int(size) {
		return fmt.Errorf("Maglev table of %d entries, want Config.MaglevTableSize = %d", len(s.Maglev), size)
	}
	pool, name := s.Backends, "Backends"
	if s.Flags&ServiceExternalLocal != 0 {
		pool, name = s.Backends[:s.LocalBackends], fmt.Sprintf("the first %d (local) Backends", s.LocalBackends)
	}
	ready := make(map[uint32]bool, len(pool))
	for _, id := range pool {
		ready[id] = true
	}
	for i, id := range s.Maglev {
		if !ready[id] {
			return fmt.Errorf("Maglev table entry %d is backend %d, which is not in %s", i, id, name)
		}
	}
	return nil
}
