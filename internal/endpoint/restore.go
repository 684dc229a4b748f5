package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
)

// Restore adopts the endpoints recorded on disk after an agent restart: an endpoint
// whose host veth still exists is re-programmed in place (same veth, same IP, the
// pinned program link updated atomically); one whose veth is gone is removed. Entries
// in the BPF endpoints map with no record are removed. It returns how many endpoints
// were adopted and how many removed. Host veths a previous agent retired and did not
// get to delete are queued for the Reaper again (retireStrays).
func (m *Manager) Restore() (adopted, removed int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	records, err := readRecords(m.cfg.Dir)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, ep := range records {
		m.eps[ep.ContainerID] = ep
		ip, perr := netip.ParseAddr(ep.IP)
		idx, lerr := m.links.IfIndex(ep.HostIfName)
		if perr != nil || errors.Is(lerr, ErrLinkNotFound) || idx != ep.HostIfIndex {
			if err := m.deleteLocked(ep.ContainerID); err != nil {
				errs = append(errs, err)
			}
			removed++
			continue
		}
		if err := m.program(ep, ip); err != nil {
			errs = append(errs, fmt.Errorf("adopt %s/%s: %w", ep.Namespace, ep.Pod, err))
			continue
		}
		adopted++
	}
	errs = append(errs, m.retireStrays())
	inMap, err := m.dp.Endpoints()
	if err != nil {
		return adopted, removed, errors.Join(append(errs, err)...)
	}
	known := map[netip.Addr]bool{}
	for _, ep := range m.eps {
		if ip, err := netip.ParseAddr(ep.IP); err == nil {
			known[ip] = true
		}
	}
	for ip := range inMap {
		if !known[ip] {
			errs = append(errs, m.dp.DeleteEndpoint(ip))
		}
	}
	return adopted, removed, errors.Join(errs...)
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
