package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/statefile"
)

// Restore adopts the endpoints recorded on disk after an agent restart: an endpoint
// whose host veth still exists is re-programmed in place (same veth, same IP, the
// pinned program link updated atomically); one whose veth is gone is removed. Entries
// in the BPF endpoints map with no record are removed. It returns how many endpoints
// were adopted and how many removed. Host veths a previous agent retired and did not
// get to delete are queued for the Reaper again (retireStrays).
//
// A record must hold its address in the IPAM pool (claimAddress): one whose address
// another container holds, or that is outside the PodCIDR, is removed, never adopted
// beside the address's owner. A record that can't be read costs only its own
// endpoint: the others are adopted, its container keeps its IP and map entry until
// CNI DEL or GC (which remove them by the address the pool holds for it), and the
// error names the file. Temporary files a crash mid-write left are removed.
// Allocations without an endpoint (an ADD in flight across the restart) get GC's
// grace period from now.
func (m *Manager) Restore() (adopted, removed int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Nothing writes records before Restore: what a crash mid-write left goes.
	errs := []error{statefile.RemoveTemporary(m.cfg.Dir)}
	records, unreadable, err := readRecords(m.cfg.Dir)
	errs = append(errs, err)
	for _, name := range unreadable {
		m.unreadable[name] = true
	}
	for _, ep := range records {
		m.eps[ep.ContainerID] = ep
		ip, perr := netip.ParseAddr(ep.IP)
		if perr == nil {
			perr = m.claimAddress(ep, ip)
		}
		idx, lerr := m.links.IfIndex(ep.HostIfName)
		if perr != nil || errors.Is(lerr, ErrLinkNotFound) || idx != ep.HostIfIndex {
			if perr != nil {
				errs = append(errs, perr)
			}
			if err := m.deleteLocked(ep.ContainerID); err != nil {
				errs = append(errs, err)
			}
			removed++
			continue
		}
		if err := m.program(ep, ip); err != nil {
			errs = append(errs, fmt.Errorf("adopt %s/%s: %w", ep.Namespace, ep.Pod, err))
			m.unadopted[ep.ContainerID] = true
			continue
		}
		adopted++
	}
	errs = append(errs, m.claimUnreadable())
	for id := range m.pool.Owners() { // not a record's that can't be read: its pod runs
		if _, ok := m.eps[id]; !ok && !m.recordUnreadable(id) {
			m.pending[id] = pendingADD{since: m.now(), restored: true}
		}
	}
	errs = append(errs, m.retireStrays(), m.removeStrayEntries())
	return adopted, removed, errors.Join(errs...)
}

// RetryAdoption programs again the endpoints Restore could not (Unadopted): a veth
// left with the last agent's programs reads maps this agent's Load may have
// replaced, so its pod's policy and source checks would stay as they were. One whose
// veth is gone or was replaced meanwhile is removed, as Restore removes it. It
// returns how many are still not adopted, and their errors.
func (m *Manager) RetryAdoption() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for id := range m.unadopted {
		ep, ok := m.eps[id]
		if !ok {
			delete(m.unadopted, id)
			continue
		}
		ip, _ := netip.ParseAddr(ep.IP)
		idx, lerr := m.links.IfIndex(ep.HostIfName)
		if errors.Is(lerr, ErrLinkNotFound) || (lerr == nil && idx != ep.HostIfIndex) {
			errs = append(errs, m.deleteLocked(id))
			continue
		}
		if err := m.program(ep, ip); err != nil {
			errs = append(errs, fmt.Errorf("adopt %s/%s: %w", ep.Namespace, ep.Pod, err))
			continue
		}
		delete(m.unadopted, id)
	}
	return len(m.unadopted), errors.Join(errs...)
}

// Unadopted is how many restored endpoints are not programmed yet (RetryAdoption).
func (m *Manager) Unadopted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.unadopted)
}

// recordUnreadable reports whether Restore could not read containerID's endpoint
// record: a record that can't be read is known by its file's name only.
func (m *Manager) recordUnreadable(containerID string) bool {
	return m.unreadable[api.RecordFileName(containerID)]
}

// forgetUnreadable drops containerID from the containers whose record Restore could
// not read: its record was written again or removed.
func (m *Manager) forgetUnreadable(containerID string) {
	delete(m.unreadable, api.RecordFileName(containerID))
}

// claimAddress makes sure the pool holds ip for ep's container, as its record says.
// A record the pool has no allocation for (the IPAM state was lost) claims its
// address back, so no new pod gets it.
func (m *Manager) claimAddress(ep *api.Endpoint, ip netip.Addr) error {
	if err := m.pool.Claim(ep.ContainerID, ip); err != nil {
		return fmt.Errorf("endpoint record of %s (%s/%s, %s) not adopted, its endpoint removed: %w",
			ep.ContainerID, ep.Namespace, ep.Pod, ep.IP, err)
	}
	return nil
}

// claimUnreadable gives a container whose record could not be read its address back
// when the pool has none for it (ipam.json was damaged too): the endpoints map entry
// that points at the container's live host veth names the address. Without it the
// address would look free and its entry stray, and the next pod would get the address
// while this one still runs on it. A record file named by a hash (a long id) names no
// container, and an ifindex two entries share names no address: those are left.
func (m *Manager) claimUnreadable() error {
	if len(m.unreadable) == 0 {
		return nil
	}
	inMap, err := m.dp.Endpoints()
	if err != nil {
		return fmt.Errorf("claim the addresses of unreadable endpoint records: %w", err)
	}
	byVeth := map[int][]netip.Addr{}
	for ip, e := range inMap {
		byVeth[e.IfIndex] = append(byVeth[e.IfIndex], ip)
	}
	var errs []error
	for name := range m.unreadable {
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || api.CheckContainerID(id) != nil || api.RecordFileName(id) != name {
			continue
		}
		if _, held := m.pool.Lookup(id); held {
			continue
		}
		idx, err := m.links.IfIndex(HostIfName(id))
		if err != nil || len(byVeth[idx]) != 1 {
			continue
		}
		if err := m.pool.Claim(id, byVeth[idx][0]); err != nil {
			errs = append(errs, fmt.Errorf("endpoint record %s can't be read and the IPAM state lost its address: "+
				"claim %s (its veth %s's map entry): %w", name, byVeth[idx][0], HostIfName(id), err))
		}
	}
	return errors.Join(errs...)
}

// removeStrayEntries removes the BPF endpoints map entries no endpoint claims,
// except those of the addresses allocated to the containers whose records could not
// be read (recordUnreadable): those pods keep their traffic.
func (m *Manager) removeStrayEntries() error {
	inMap, err := m.dp.Endpoints()
	if err != nil {
		return err
	}
	known := map[netip.Addr]bool{}
	for _, ep := range m.eps {
		if ip, err := netip.ParseAddr(ep.IP); err == nil {
			known[ip] = true
		}
	}
	for id, ip := range m.pool.Owners() {
		if m.recordUnreadable(id) {
			known[ip] = true
		}
	}
	var errs []error
	for ip := range inMap {
		if !known[ip] {
			errs = append(errs, m.dp.DeleteEndpoint(ip))
		}
	}
	return errors.Join(errs...)
}

// retireStrays queues for the Reaper every pod host veth that is down and that no
// one owns (vethOwners): one retired by a DEL whose veth the previous agent had not
// deleted yet. The veth of an ADD the previous agent allocated for and that has not
// registered its endpoint is the plugin's, down until it brings it up, and stays.
func (m *Manager) retireStrays() error {
	down, err := m.links.DownPodVeths()
	if err != nil {
		return fmt.Errorf("list retired pod veths: %w", err)
	}
	for name, idx := range strays(down, ownersOf(m.eps, m.pool.Owners())) {
		m.reaper.add(name, idx)
	}
	return nil
}

// strays are the veths of down (name to index) that no one of owners owns.
func strays(down map[string]int, owners vethOwners) map[string]int {
	out := map[string]int{}
	for name, idx := range down {
		if !owners.owns(name, idx) {
			out[name] = idx
		}
	}
	return out
}
