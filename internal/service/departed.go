package service

import "github.com/myelin-net/myelin/internal/datapath"

// Departure is a backend that left a frontend (its Service's endpoints, or the
// frontend itself was removed) while another frontend still lists it. The backend
// keeps its id, so the datapath's conntrack entries of the frontend's flows that
// were load-balanced to it would keep them going there (a deleted backend ends
// them by itself); and a UDP socket socket-LB connected to it through the frontend
// stays connected. The agent ends both: it deletes those conntrack entries
// (datapath.EndServiceFlows, then Forget) and closes those sockets (OnDeparture).
type Departure struct {
	Frontend datapath.Frontend
	Backend  Backend
	// IDs are the frontend's id when the backend left it, and the backend's.
	IDs datapath.ServiceBackend
	seq uint64 // tells a departure from a later one of the same pair
}

// OnDeparture has fn called with each departure as it is recorded, with the
// Manager's lock held: fn must not block or call the Manager.
func (m *Manager) OnDeparture(fn func(Departure)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onDeparture = fn
}

// Departed returns the departures recorded and not yet forgotten, each pair once.
// The frontend no longer lists the backend by the time they are recorded, so no new
// flow through it picks the backend: every conntrack entry that names a pair is of
// a flow opened before the departure (unless the backend rejoins the frontend while
// the caller walks the tables: the flows opened to it meanwhile choose again).
func (m *Manager) Departed() []Departure {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Departure, 0, len(m.departed))
	for _, d := range m.departed {
		out = append(out, d)
	}
	return out
}

// Forget forgets ds (from Departed) once their flows are ended; a pair that departed
// again since Departed returned it stays recorded.
func (m *Manager) Forget(ds []Departure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		if cur, ok := m.departed[d.IDs]; ok && cur.seq == d.seq {
			delete(m.departed, d.IDs)
		}
	}
}

// leaving returns the departures of the backends (ids) that a frontend listed and
// now does not: those of prev missing from now (nil: removed), under prev's id.
// Whether their backends stay programmed is known only once the Service's
// frontends are all written (recordDepartures).
func (m *Manager) leaving(prev, now *Applied) []Departure {
	kept := map[uint32]bool{}
	if now != nil {
		for _, id := range now.backendIDs() {
			kept[id] = true
		}
	}
	var out []Departure
	for _, id := range prev.backendIDs() {
		if kept[id] {
			continue
		}
		out = append(out, Departure{Frontend: prev.Key, Backend: m.byID[id],
			IDs: datapath.ServiceBackend{Service: prev.ID, Backend: id}})
	}
	return out
}

// recordDepartures records ds whose backends are still programmed (listed by
// another frontend); a deleted backend's flows and sockets end with its deletion.
func (m *Manager) recordDepartures(ds []Departure) {
	for _, d := range ds {
		if _, ok := m.refs[d.IDs.Backend]; !ok {
			continue
		}
		m.departSeq++
		d.seq = m.departSeq
		m.departed[d.IDs] = d
		if m.onDeparture != nil {
			m.onDeparture(d)
		}
	}
}

// rejoined forgets the departures of the backends (ids) frontend a lists again:
// its flows may be pinned to them once more, rightly.
func (m *Manager) rejoined(a *Applied) {
	if len(m.departed) == 0 {
		return
	}
	for _, id := range a.backendIDs() {
		delete(m.departed, datapath.ServiceBackend{Service: a.ID, Backend: id})
	}
}
