package endpoint

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/myelin-net/myelin/internal/api"
)

// An endpoint is deleted only by its owner. Its record is keyed by the container id,
// so a delete for another container id never reaches it; a caller that also names the
// host veth index it saw (CNI DEL, a deferred delete) must match the record's, so a
// delete meant for an earlier attachment of a reused container id or veth name leaves
// the current one alone. What is keyed by the address (map entry, route) is removed
// only while it points at the endpoint's own veth (see unprogram).

// DeleteOwned is Delete for a caller that saw the endpoint's host veth at ifindex (0:
// it saw none and claims no veth). A record on another veth is not deleted:
// api.ErrNotOwner.
func (m *Manager) DeleteOwned(containerID string, ifindex int) error {
	return m.DeleteAttachment(containerID, ifindex, "")
}

// DeleteAttachment is DeleteOwned for the attachment of the container's
// interface ifName (CNI DEL's CNI_IFNAME; "" names none). The host veth's name
// is the container id's, so a DEL of another interface of the container (the
// runtime's cleanup after a refused ADD of a second interface, net1 beside
// eth0) finds the same veth: a record of another interface name is not
// deleted either (api.ErrNotOwner).
func (m *Manager) DeleteAttachment(containerID string, ifindex int, ifName string) error {
	if err := api.CheckContainerID(containerID); err != nil {
		return fmt.Errorf("delete endpoint: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.eps[containerID]
	switch {
	case ok && ifindex != 0 && ep.HostIfIndex != ifindex:
		return fmt.Errorf("delete endpoint %s (%s/%s): it is on host veth %s index %d, the request names index %d: %w",
			containerID, ep.Namespace, ep.Pod, ep.HostIfName, ep.HostIfIndex, ifindex, api.ErrNotOwner)
	case ok && ifName != "" && ep.IfName != "" && ep.IfName != ifName:
		return fmt.Errorf("delete endpoint %s (%s/%s): it is the container's interface %s, the request names %s: %w",
			containerID, ep.Namespace, ep.Pod, ep.IfName, ifName, api.ErrNotOwner)
	}
	return m.deleteLocked(containerID)
}

// DeleteRecorded carries out a delete CNI DEL recorded while the agent was
// unreachable: the endpoint is removed and its IP released if the record still is the
// attachment DEL saw (same host veth index, or DEL saw none) and its veth is gone. It
// reports whether it removed an endpoint; a record for an endpoint that is gone
// already only makes sure the IP is released, unless an ADD of the container id
// allocated it after the delete was recorded (a new attachment in flight). A
// container whose record Restore could not read is removed all the same (its
// veth index is unknown): map entry, route, record and IP. A false
// with no error means the recorded delete is stale (the container id was attached
// again since): drop it.
func (m *Manager) DeleteRecorded(d api.DeletedEndpoint) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ep, ok := m.eps[d.ContainerID]
	if !ok {
		if p, ok := m.pending[d.ContainerID]; ok && !p.restored && p.allocatedAfter(d) {
			return false, nil
		}
		if m.recordUnreadable(d.ContainerID) {
			if err := m.deleteLocked(d.ContainerID); err != nil {
				return false, err
			}
			return true, nil
		}
		delete(m.pending, d.ContainerID)
		return false, m.pool.Release(d.ContainerID)
	}
	if d.HostIfIndex != 0 && ep.HostIfIndex != d.HostIfIndex {
		return false, nil
	}
	idx, err := m.links.IfIndex(ep.HostIfName)
	switch {
	case errors.Is(err, ErrLinkNotFound):
	case err != nil:
		return false, fmt.Errorf("deleted endpoint %s: look up its veth %s: %w", d.ContainerID, ep.HostIfName, err)
	case idx == ep.HostIfIndex:
		return false, nil // its veth is alive: not the attachment DEL removed
	}
	if err := m.deleteLocked(d.ContainerID); err != nil {
		return false, err
	}
	return true, nil
}

// allocatedAfter reports whether p's allocation was made after DEL recorded d: by
// CLOCK_BOOTTIME when both carry it, so a wall clock stepped in between (NTP, an
// operator) can neither release an ADD in flight nor keep what a failed ADD
// allocated; a record of another boot is older (records outlive agents, never
// the other way). By the wall clock when the record is an older plugin's.
func (p pendingADD) allocatedAfter(d api.DeletedEndpoint) bool {
	switch {
	case !d.DeletedBoot.Known() || !p.sinceBoot.Known():
		return p.since.After(d.Deleted)
	case d.DeletedBoot.Boot != p.sinceBoot.Boot:
		return true
	}
	return p.sinceBoot.Nanos > d.DeletedBoot.Nanos
}

// ipClaimedByOther reports whether an endpoint other than containerID has ip.
func (m *Manager) ipClaimedByOther(containerID string, ip netip.Addr) bool {
	for id, ep := range m.eps {
		if id != containerID && ep.IP == ip.String() {
			return true
		}
	}
	return false
}

// retireHostLink sets containerID's host veth down and queues it for the Reaper. With
// a record (ep not nil) a veth of that name on another index is another attachment's
// and stays.
func (m *Manager) retireHostLink(containerID string, ep *api.Endpoint) error {
	name := HostIfName(containerID)
	idx, err := m.links.IfIndex(name)
	switch {
	case errors.Is(err, ErrLinkNotFound):
		return nil
	case err != nil:
		return err
	case ep != nil && idx != ep.HostIfIndex:
		return nil
	}
	if err := m.links.SetLinkDown(idx); err != nil {
		return fmt.Errorf("set host veth %s down: %w", name, err)
	}
	m.reaper.add(name, idx)
	return nil
}

// vethOwners are the pod host veth names someone owns, with the index each owns. An
// endpoint owns the veth its record names (name and index). An ADD between allocate
// and register (its container id has an IP, no endpoint yet) owns its veth name
// whatever the index (anyIndex): the plugin creates the pair down, brings the host
// side up and registers it, or deletes it and releases the IP itself when ADD fails,
// and the runtime's DEL after a failed ADD retires what is left.
type vethOwners map[string]int

// anyIndex is the index an ADD in progress owns: any.
const anyIndex = -1

// ownersOf are the owners of veths by the endpoints eps and the IP allocations
// (container id to address).
func ownersOf(eps map[string]*api.Endpoint, allocated map[string]netip.Addr) vethOwners {
	o := vethOwners{}
	for id := range allocated {
		o[HostIfName(id)] = anyIndex
	}
	for _, ep := range eps {
		o[ep.HostIfName] = ep.HostIfIndex
	}
	return o
}

// owns reports whether someone owns the veth name at index.
func (o vethOwners) owns(name string, index int) bool {
	i, ok := o[name]
	return ok && (i == anyIndex || i == index)
}

// ownsVeth reports whether an endpoint or an ADD in progress owns the veth name at
// index now; the Reaper asks before each delete.
func (m *Manager) ownsVeth(name string, index int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ownersOf(m.eps, m.pool.Owners()).owns(name, index)
}
