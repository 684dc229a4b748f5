package agent

import (
	"maps"
	"net/netip"
)

// ipcacheMirror is policyMaps whose IPCache is answered from what this process last
// read from the map or wrote to it, instead of walking the map: a walk costs two
// syscalls per entry, 100,000 at 50,000 pods, and was ~30% of the policy loop's CPU
// under pod churn (docs/scale.md). The policy loop is the map's only writer and the
// only user of this value (one goroutine). forget makes the next IPCache walk the map
// again; the loop calls it on every resync, so anything else that changed the map is
// repaired within policyResync, and a failed write forgets at once (its outcome is
// unknown).
type ipcacheMirror struct {
	policyMaps
	ipcache map[netip.Prefix]uint32 // nil: not known, walk the map
}

// IPCache returns a copy of the mirror, read from the map if it is not known.
func (m *ipcacheMirror) IPCache() (map[netip.Prefix]uint32, error) {
	if m.ipcache == nil {
		cur, err := m.policyMaps.IPCache()
		if err != nil {
			return nil, err
		}
		m.ipcache = cur
	}
	return maps.Clone(m.ipcache), nil
}

func (m *ipcacheMirror) SetIPCache(p netip.Prefix, id uint32) error {
	err := m.policyMaps.SetIPCache(p, id)
	switch {
	case err != nil:
		m.forget()
	case m.ipcache != nil:
		m.ipcache[p.Masked()] = id
	}
	return err
}

func (m *ipcacheMirror) DeleteIPCache(p netip.Prefix) error {
	err := m.policyMaps.DeleteIPCache(p)
	switch {
	case err != nil:
		m.forget()
	case m.ipcache != nil:
		delete(m.ipcache, p.Masked())
	}
	return err
}

// forget drops the mirror: the next IPCache reads the map.
func (m *ipcacheMirror) forget() { m.ipcache = nil }
