package endpoint

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/ipam"
)

// Datapath is what the manager needs of the BPF datapath.
type Datapath interface {
	UpsertEndpoint(ip netip.Addr, ep datapath.EndpointInfo) error
	DeleteEndpoint(ip netip.Addr) error
	// DeleteEndpointOf deletes ip's entry only if it points at ifindex; another
	// veth's entry is left and datapath.ErrEndpointNotOwned returned.
	DeleteEndpointOf(ip netip.Addr, ifindex int) error
	Endpoints() (map[netip.Addr]datapath.EndpointInfo, error)
	AttachEndpoint(ifindex int, name string) error
	// DetachEndpoint detaches from the link name at ifindex (0: any index); a link
	// of that name at another index is left alone.
	DetachEndpoint(ifindex int, name string) error
}

// Links is what the manager needs of the node's network stack (netlink in the agent,
// a fake in unit tests).
type Links interface {
	// IfIndex returns the index of a link, or an error wrapping ErrLinkNotFound.
	IfIndex(name string) (int, error)
	// SetLinkDown sets the link at index down; a link that is gone is no error.
	SetLinkDown(index int) error
	// DeleteLinkAt deletes the link at index if it is still named name; a link that
	// is gone or renamed is no error.
	DeleteLinkAt(index int, name string) error
	// DownPodVeths returns the host veths named like a pod's (api.IsHostIfName) that
	// are down, name to index.
	DownPodVeths() (map[string]int, error)
	ReplacePodRoute(ip netip.Addr, ifindex int) error
	DeletePodRoute(ip netip.Addr) error
}

// ErrLinkNotFound is returned by Links.IfIndex for a link that does not exist.
var ErrLinkNotFound = errors.New("link not found")

// ErrEndpointExists is returned (wrapped) by Release for a container whose endpoint is
// registered.
var ErrEndpointExists = errors.New("endpoint exists")

// Config configures a Manager.
type Config struct {
	Dir  string // where endpoint records live
	Node string
	MTU  int
	// RouteMTU is the MTU on pods' default routes: the device MTU minus the tunnel
	// overhead in tunnel mode, so TCP's MSS fits the tunnel.
	RouteMTU int
	// GSOIPv4MaxSize is what new pods' veths get as IPv4 GSO and GRO size (BIG TCP);
	// 0 leaves the kernel's 64 KiB.
	GSOIPv4MaxSize int
}

// Manager keeps the endpoints of one node.
type Manager struct {
	cfg   Config
	dp    Datapath
	links Links
	pool  *ipam.Pool
	// reaper deletes the host veths of deleted endpoints after DEL has answered.
	reaper *Reaper

	mu  sync.Mutex
	eps map[string]*api.Endpoint // by container id
	// pending are the allocations whose endpoint is not registered yet (an ADD in
	// progress, or one that died): GC leaves them allocationGrace, so it can't take
	// an ADD's IP and veth from under it.
	pending map[string]pendingADD
	// unreadable are the file names of the endpoint records Restore could not read
	// (recordUnreadable finds a container's): their containers keep their IP, map
	// entry and route until DEL or GC, which find them by the address the pool holds
	// for the container (unprogramUnreadable).
	unreadable map[string]bool
	// unadopted are the containers whose endpoint Restore could not program again
	// (RetryAdoption): their veths may still run the last agent's programs, which
	// read maps a Load may have replaced.
	unadopted map[string]bool
	now       func() time.Time
	bootNow   func() api.BootTime
	// claims says which free addresses another pod still claims (UseAddressClaims);
	// nil: none.
	claims AddressClaims
}

// AddressClaims says whether a Pod other than the one of UID podUID still claims ip:
// its status lists ip while it is being deleted (its sandbox gone, ip released), so
// other nodes still take ip for that Pod. It is called on CNI ADD's path with the
// manager locked: it must be cheap and must not call the manager.
type AddressClaims func(ip netip.Addr, podUID string) bool

// UseAddressClaims makes Allocate pass over the free addresses claims says another
// pod still claims (ipam.Claimed); until then none is.
func (m *Manager) UseAddressClaims(claims AddressClaims) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims = claims
}

// pendingADD is an allocation whose endpoint is not registered yet.
type pendingADD struct {
	since time.Time // when it was last made, or when the agent restarted (restored)
	// sinceBoot is since on CLOCK_BOOTTIME (unknown for a restored allocation).
	sinceBoot api.BootTime
	// restored: the allocation is a previous agent's, made at a time unknown.
	restored bool
	// attempts are the ADDs of the container id in flight that this agent allocated
	// for (api.Allocation.Attempt): a runtime may retry an ADD before the first has
	// answered, and both get the same IP. A failed one's release frees it only when
	// no other is left (Release).
	attempts map[string]bool
}

// allocationGrace is how long GC keeps an allocation whose endpoint is not
// registered: twice what the plugin's ADD may take in all (api.DefaultTimeout).
const allocationGrace = 2 * api.DefaultTimeout

// NewManager returns a manager; call Restore before serving requests.
func NewManager(cfg Config, dp Datapath, links Links, pool *ipam.Pool) *Manager {
	m := &Manager{cfg: cfg, dp: dp, links: links, pool: pool, eps: map[string]*api.Endpoint{},
		pending: map[string]pendingADD{}, unreadable: map[string]bool{}, unadopted: map[string]bool{}, now: time.Now, bootNow: api.BootNow}
	m.reaper = newReaper(links, m.ownsVeth)
	return m
}

// Reaper is what deletes the host veths of deleted endpoints; run it (Reaper.Run)
// for as long as the manager serves.
func (m *Manager) Reaper() *Reaper { return m.reaper }

// Allocate reserves the pod's IP and names its host-side veth. A retired veth of
// that name (the container id was deleted a moment ago) is deleted first, so the
// plugin can create the pair again, also into the same pod netns. Each call is an
// attempt of its own (api.Allocation.Attempt), which a failed ADD's Release names.
func (m *Manager) Allocate(ref api.PodRef) (api.Allocation, error) {
	if err := api.CheckPodRef(ref); err != nil {
		return api.Allocation{}, fmt.Errorf("allocate: %w", err)
	}
	if err := m.reaper.finish(HostIfName(ref.ContainerID)); err != nil {
		return api.Allocation{}, fmt.Errorf("allocate for %s/%s: delete the retired veth of the container's previous attachment: %w",
			ref.Namespace, ref.Pod, err)
	}
	attempt := rand.Text()
	// The allocation and its pending mark are one step: a GC between them would take
	// the allocation of an ADD in flight.
	m.mu.Lock()
	_, held := m.pool.Lookup(ref.ContainerID)
	ip, err := m.pool.Allocate(ref.ContainerID, m.claimedFor(ref.PodUID))
	if err == nil {
		// A container with a registered endpoint, or one whose record Restore could
		// not read and that holds its address (its pod keeps it, with its map entry
		// and route), records no attempt: its IP is the endpoint's, which Release
		// never frees. An address new to it is this ADD's.
		_, registered := m.eps[ref.ContainerID]
		_, inFlight := m.pending[ref.ContainerID] // an address an ADD of it allocated
		if !registered && (inFlight || !(held && m.recordUnreadable(ref.ContainerID))) {
			m.markPending(ref.ContainerID, attempt)
		}
	}
	m.mu.Unlock()
	if err != nil {
		if errors.Is(err, ipam.ErrClaimed) { // the runtime retries the ADD
			return api.Allocation{}, fmt.Errorf("no free pod IP on node %s for %s/%s yet: %w", m.cfg.Node, ref.Namespace, ref.Pod, err)
		}
		if errors.Is(err, ipam.ErrExhausted) {
			return api.Allocation{}, fmt.Errorf("no free pod IP on node %s for %s/%s: %w; delete pods on this node or give it a larger PodCIDR",
				m.cfg.Node, ref.Namespace, ref.Pod, err)
		}
		return api.Allocation{}, err
	}
	return api.Allocation{IP: ip.String(), Gateway: api.PodGateway, MTU: m.cfg.MTU, RouteMTU: m.cfg.RouteMTU,
		HostIfName: HostIfName(ref.ContainerID), GSOIPv4MaxSize: m.cfg.GSOIPv4MaxSize, Attempt: attempt}, nil
}

// claimedFor is what the pool passes over for the pod of UID podUID: addresses
// another pod still claims; the pod's own claim (its status still lists the address
// of its previous sandbox) does not keep the address from it. m.mu is held.
func (m *Manager) claimedFor(podUID string) ipam.Claimed {
	claims := m.claims
	if claims == nil {
		return nil
	}
	return func(ip netip.Addr) bool { return claims(ip, podUID) }
}

// markPending records attempt as an ADD of containerID in flight, beside the others.
func (m *Manager) markPending(containerID, attempt string) {
	attempts := m.pending[containerID].attempts
	if attempts == nil {
		attempts = map[string]bool{}
	}
	attempts[attempt] = true
	m.pending[containerID] = pendingADD{since: m.now(), sinceBoot: m.bootNow(), attempts: attempts}
}

// Put registers an endpoint whose veth the plugin has built, and programs the
// datapath: endpoints map entry, program on the host veth, /32 route.
func (m *Manager) Put(ep api.Endpoint) (api.Endpoint, error) {
	if err := api.CheckPodRef(ep.PodRef); err != nil {
		return api.Endpoint{}, fmt.Errorf("register endpoint: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ip, err := netip.ParseAddr(ep.IP)
	if err != nil {
		return api.Endpoint{}, fmt.Errorf("endpoint %s: bad IP %q", ep.ContainerID, ep.IP)
	}
	if owned, ok := m.pool.Lookup(ep.ContainerID); !ok || owned != ip {
		return api.Endpoint{}, fmt.Errorf("endpoint %s: IP %s is not allocated to it (not allocated first, or a CNI GC or DEL "+
			"removed this unfinished ADD's allocation); the runtime retries ADD", ep.ContainerID, ip)
	}
	if ep.HostIfName != HostIfName(ep.ContainerID) {
		return api.Endpoint{}, fmt.Errorf("endpoint %s: host interface %q is not the one allocated (%s)", ep.ContainerID, ep.HostIfName, HostIfName(ep.ContainerID))
	}
	old := m.eps[ep.ContainerID]
	if old != nil {
		ep.ID, ep.Created = old.ID, old.Created
	} else {
		ep.ID, ep.Created = m.freeID(), time.Now()
	}
	if err := m.program(&ep, ip); err != nil {
		return api.Endpoint{}, errors.Join(err, m.undoPut(&ep, ip, old))
	}
	if err := writeRecord(m.cfg.Dir, &ep); err != nil {
		return api.Endpoint{}, errors.Join(err, m.undoPut(&ep, ip, old))
	}
	m.eps[ep.ContainerID] = &ep
	delete(m.pending, ep.ContainerID)
	delete(m.unadopted, ep.ContainerID) // programmed by this agent now
	m.forgetUnreadable(ep.ContainerID)  // its record is whole again
	return ep, nil
}

// undoPut takes back what a failed Put of ep programmed. When the container's
// endpoint was registered before at the same veth and address (a PUT the plugin
// retried after losing the answer), that endpoint stays registered, so the datapath
// must keep delivering to it: it is programmed again, not removed (which would leave
// the live pod without its map entry, route and source check while the agent lists it).
func (m *Manager) undoPut(ep *api.Endpoint, ip netip.Addr, old *api.Endpoint) error {
	if old != nil && old.HostIfIndex == ep.HostIfIndex && old.IP == ep.IP {
		if err := m.program(old, ip); err != nil {
			return fmt.Errorf("restore the registered endpoint: %w", err)
		}
		return nil
	}
	_ = m.unprogram(ep, ip) // each step is best effort; ep was never registered
	return nil
}

// program makes the datapath deliver to ep: map entry, TCX program, route.
func (m *Manager) program(ep *api.Endpoint, ip netip.Addr) error {
	idx, err := m.links.IfIndex(ep.HostIfName)
	if err != nil {
		return fmt.Errorf("endpoint %s: host veth %s: %w", ep.ContainerID, ep.HostIfName, err)
	}
	if idx != ep.HostIfIndex {
		return fmt.Errorf("endpoint %s: host veth %s has index %d, not %d", ep.ContainerID, ep.HostIfName, idx, ep.HostIfIndex)
	}
	podMAC, err1 := net.ParseMAC(ep.PodMAC)
	hostMAC, err2 := net.ParseMAC(ep.HostMAC)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("endpoint %s: %w", ep.ContainerID, err)
	}
	info := datapath.EndpointInfo{IfIndex: idx, PodMAC: podMAC, HostMAC: hostMAC, ID: ep.ID}
	if err := m.dp.UpsertEndpoint(ip, info); err != nil {
		return fmt.Errorf("endpoint %s: write endpoints map: %w", ep.ContainerID, err)
	}
	if err := m.dp.AttachEndpoint(idx, ep.HostIfName); err != nil {
		return fmt.Errorf("endpoint %s: attach to %s: %w", ep.ContainerID, ep.HostIfName, err)
	}
	if err := m.links.ReplacePodRoute(ip, idx); err != nil {
		return fmt.Errorf("endpoint %s: route %s: %w", ep.ContainerID, ip, err)
	}
	return nil
}

// unprogram undoes program; each step tolerates what is already gone. What is keyed
// by the address (map entry, /32 route) is removed only while it is ep's: never when
// another endpoint claims the address or the map entry points at another veth.
func (m *Manager) unprogram(ep *api.Endpoint, ip netip.Addr) error {
	detach := m.dp.DetachEndpoint(ep.HostIfIndex, ep.HostIfName)
	if m.ipClaimedByOther(ep.ContainerID, ip) {
		return detach
	}
	err := m.dp.DeleteEndpointOf(ip, ep.HostIfIndex)
	if errors.Is(err, datapath.ErrEndpointNotOwned) {
		return detach
	}
	return errors.Join(detach, err, m.links.DeletePodRoute(ip))
}

// unprogramUnreadable is unprogram for a container whose record could not be read
// (Restore kept its map entry and route): its veth is the one named after it and its
// address the one the pool holds for it. The map entry of that address is the
// container's whatever veth it points at: no other container can register an address
// allocated to this one.
func (m *Manager) unprogramUnreadable(containerID string) error {
	detach := m.dp.DetachEndpoint(0, HostIfName(containerID))
	ip, ok := m.pool.Lookup(containerID)
	if !ok || m.ipClaimedByOther(containerID, ip) {
		return detach
	}
	return errors.Join(detach, m.dp.DeleteEndpoint(ip), m.links.DeletePodRoute(ip))
}

// Release gives back the IP allocated to containerID whose ADD failed before its
// endpoint was registered (the plugin's cleanup); attempt is the failed ADD's
// (api.Allocation.Attempt). A container with a registered endpoint (or one whose
// record Restore could not read, which kept its datapath) keeps its IP:
// only DEL removes a live attachment, so a failed second ADD for it can't free the
// address another pod would then get while the endpoint, its datapath entry and its
// policy identity still name it. A container with another ADD in flight keeps it
// too, and it is no error: that ADD may register (the runtime retried an ADD before
// the first answered, and one of the two found the veth taken), and when it fails
// its own release frees the IP. An empty attempt (a plugin before attempts were
// named) frees the IP whatever other ADD is in flight.
func (m *Manager) Release(containerID, attempt string) error {
	if err := api.CheckContainerID(containerID); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ep, ok := m.eps[containerID]; ok {
		return fmt.Errorf("%w: container %s (pod %s/%s) has a live endpoint on node %s with IP %s on %s; "+
			"its IP is released by CNI DEL, not by a failed ADD's cleanup", ErrEndpointExists, containerID, ep.Namespace, ep.Pod,
			m.cfg.Node, ep.IP, ep.HostIfName)
	}
	if _, pending := m.pending[containerID]; !pending && m.recordUnreadable(containerID) {
		ip, _ := m.pool.Lookup(containerID)
		return fmt.Errorf("%w: container %s has an endpoint on node %s with IP %s on %s whose record the agent could not "+
			"read at its start (it kept the address, map entry and route); its IP is released by CNI DEL, not by a failed "+
			"ADD's cleanup", ErrEndpointExists, containerID, m.cfg.Node, ip, HostIfName(containerID))
	}
	if p, ok := m.pending[containerID]; ok && attempt != "" {
		delete(p.attempts, attempt)
		if len(p.attempts) > 0 {
			return nil
		}
	}
	delete(m.pending, containerID)
	return m.pool.Release(containerID)
}

// Delete removes an endpoint and its IP and retires its host veth (down now, deleted
// by the Reaper). Nothing there is success.
func (m *Manager) Delete(containerID string) error {
	if err := api.CheckContainerID(containerID); err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteLocked(containerID)
}

func (m *Manager) deleteLocked(containerID string) error {
	var errs []error
	ep, ok := m.eps[containerID]
	switch {
	case ok:
		ip, _ := netip.ParseAddr(ep.IP)
		errs = append(errs, m.unprogram(ep, ip))
		delete(m.eps, containerID)
	case m.recordUnreadable(containerID):
		errs = append(errs, m.unprogramUnreadable(containerID))
	}
	m.forgetUnreadable(containerID)
	delete(m.pending, containerID)
	delete(m.unadopted, containerID)
	errs = append(errs,
		m.retireHostLink(containerID, ep),
		removeRecord(m.cfg.Dir, containerID),
		m.pool.Release(containerID))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete endpoint %s: %w", containerID, err)
	}
	return nil
}

// freeID returns an endpoint id not in use (1..65535).
func (m *Manager) freeID() uint16 {
	used := map[uint16]bool{}
	for _, ep := range m.eps {
		used[ep.ID] = true
	}
	for id := uint16(1); id != 0; id++ {
		if !used[id] {
			return id
		}
	}
	return 0
}

// Get returns one endpoint.
func (m *Manager) Get(containerID string) (api.Endpoint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.eps[containerID]
	if !ok {
		return api.Endpoint{}, false
	}
	return *ep, true
}

// List returns all endpoints.
func (m *Manager) List() []api.Endpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]api.Endpoint, 0, len(m.eps))
	for _, ep := range m.eps {
		out = append(out, *ep)
	}
	return out
}

// PodByIP names the pod ("namespace/name") that has ip, for the monitor.
func (m *Manager) PodByIP(ip netip.Addr) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ep := range m.eps {
		if ep.IP == ip.String() {
			return ep.Namespace + "/" + ep.Pod
		}
	}
	return ""
}

// GC deletes every endpoint (and IP allocation) whose container id is not in keep,
// except allocations made less than allocationGrace ago whose endpoint is not
// registered yet: the runtime's list of valid attachments can't hold an ADD still
// in progress.
// Unlike Delete it returns once their veths are deleted too: the runtime collects
// garbage in the background, and wants it gone when GC answers.
func (m *Manager) GC(keep []string) ([]string, error) {
	removed, err := m.collect(keep)
	errs := []error{err}
	for _, id := range removed {
		errs = append(errs, m.reaper.finish(HostIfName(id)))
	}
	return removed, errors.Join(errs...)
}

// collect deletes the endpoints and allocations GC removes and returns their ids.
func (m *Manager) collect(keep []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keepSet := map[string]bool{}
	for _, id := range keep {
		keepSet[id] = true
	}
	candidates := map[string]bool{}
	for id := range m.eps {
		candidates[id] = true
	}
	for id := range m.pool.Owners() {
		candidates[id] = true
	}
	var removed []string
	var errs []error
	for id := range candidates {
		if keepSet[id] {
			continue
		}
		if _, registered := m.eps[id]; !registered {
			if p, ok := m.pending[id]; ok && m.now().Sub(p.since) < allocationGrace {
				continue // an ADD in progress: its endpoint comes, or the next GC takes it
			}
		}
		if err := m.deleteLocked(id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}
