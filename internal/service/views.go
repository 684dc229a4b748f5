package service

import (
	"cmp"
	"slices"
	"strings"

	"github.com/myelin-net/myelin/internal/datapath"
)

// Snapshot returns every programmed frontend, sorted by Service and address, and the
// address of every backend id they name.
func (m *Manager) Snapshot() ([]Applied, map[uint32]Backend) {
	m.mu.Lock()
	out := make([]Applied, 0, len(m.frontends))
	for _, a := range m.frontends {
		out = append(out, *a)
	}
	backends := make(map[uint32]Backend, len(m.byID))
	for id, b := range m.byID {
		backends[id] = b
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Applied) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return compareFrontends(a.Key, b.Key)
	})
	return out, backends
}

// compareFrontends orders frontends by address, port and protocol.
func compareFrontends(a, b datapath.Frontend) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.Proto, b.Proto)
}

// ServiceNames returns the Services that have frontends programmed (namespace/name).
func (m *Manager) ServiceNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.byService))
	for name := range m.byService {
		out = append(out, name)
	}
	return out
}

// Counts returns the numbers of Services, frontends and backends programmed.
func (m *Manager) Counts() (services, frontends, backends int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byService), len(m.frontends), len(m.backends)
}

// ServiceOf names the Service ("namespace/name") of frontend key, "" if none (flows).
func (m *Manager) ServiceOf(key datapath.Frontend) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.frontends[key]; ok {
		return a.Service
	}
	return ""
}
