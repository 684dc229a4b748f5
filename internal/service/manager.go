package service

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
)

// Datapath is the part of *datapath.Datapath the Manager programs.
type Datapath interface {
	UpsertBackend(id uint32, b datapath.Backend) error
	DeleteBackend(id uint32) error
	UpsertService(fe datapath.Frontend, s datapath.Service) error
	DeleteService(fe datapath.Frontend) error
	Services() ([]datapath.ServiceEntry, error)
	Backends() (map[uint32]datapath.Backend, error)
	// ConntrackIDs returns the service and backend ids Service conntrack entries name.
	ConntrackIDs() (services, backends []uint32, err error)
	// ServiceCapacity returns how many frontends and backend slots the maps hold.
	ServiceCapacity() (frontends, slots int)
}

// Applied is one programmed frontend, as `myelin services` shows it: what its
// Frontend said, with its backends as ids (Snapshot maps them back to addresses).
// Kept compact, one per frontend: 10,000 Services of 10 backends are 10,000 of them.
type Applied struct {
	Key      datapath.Frontend
	Service  string // namespace/name; "" for an adopted frontend no Service claimed yet
	PortName string
	Type     FrontendType
	Affinity time.Duration
	ID       uint32
	// ExternalLocal and Local are Frontend's.
	ExternalLocal bool
	Local         int
	// Active and Terminating are the ids of Frontend.Active and .Terminating, in
	// their order. Never changed in place: a new Apply stores a new Applied.
	Active, Terminating []uint32
}

// Manager keeps the datapath's service, backend and Maglev maps equal to the
// frontends it is given, one Service at a time. Ids are stable: a frontend keeps its
// id while it exists and a backend (addr:port, shared by every Service that has it)
// keeps its id while any frontend refers to it, so open flows, which the datapath's
// conntrack pins to a backend id, keep their backend across updates and agent
// restarts; a backend that leaves one frontend while another keeps it is recorded
// as departed (Departed), so the agent ends that frontend's flows to it. A freed id
// is not reused while conntrack entries may still name it
// (idSet), and a frontend taken over by another Service (a reused NodePort or
// ClusterIP) gets a new id, so flows of the old Service never pass for the new
// one's. Safe for concurrent use.
type Manager struct {
	dp         Datapath
	maglevSize int // 0: random selection
	// maxFrontends and maxSlots are dp's capacity: one Service needing more is
	// refused before it is built (Options).
	maxFrontends, maxSlots int

	mu        sync.Mutex
	byService map[string][]datapath.Frontend
	frontends map[datapath.Frontend]*Applied // nil Applied.Service: adopted, not claimed yet
	feIDs     idSet
	backends  map[Backend]uint32
	byID      map[uint32]Backend // the inverse of backends
	refs      map[uint32]int
	beIDs     idSet
	tables    map[string][]int32 // Maglev tables by backend names: Services sharing pods share them
	tableSize int                // bytes in tables, at most maglevCacheBytes
	adopted   adoptedState       // programmed by the previous run, not applied yet
	lastApply time.Duration
	// contested are the Services a frontend was taken from (two Services claiming
	// one address and port: an externalIP on another's ClusterIP, a reused one), and
	// reclaims those to apply again because the owner that displaced them let the
	// frontend go (Reclaims): else it would stay deleted for them until their next
	// event.
	contested map[datapath.Frontend][]string
	reclaims  []string
	// departed are the backends that left a frontend while others keep them, until
	// their flows are ended (departed.go).
	departed    map[datapath.ServiceBackend]Departure
	departSeq   uint64
	onDeparture func(Departure)
}

// NewManager returns a Manager over dp that adopts the frontends and backends already
// programmed (from a previous run of the agent) with their ids. maglevSize is the
// Maglev table size, 0 for random backend selection.
func NewManager(dp Datapath, maglevSize int) (*Manager, error) {
	m := &Manager{dp: dp, maglevSize: maglevSize, byService: map[string][]datapath.Frontend{},
		frontends: map[datapath.Frontend]*Applied{}, backends: map[Backend]uint32{}, byID: map[uint32]Backend{}, refs: map[uint32]int{},
		tables: map[string][]int32{}, adopted: adoptedState{}, contested: map[datapath.Frontend][]string{},
		departed: map[datapath.ServiceBackend]Departure{}, feIDs: newIDSet(datapath.ServiceCTMaxTimeout), beIDs: newIDSet(datapath.ServiceCTMaxTimeout)}
	m.maxFrontends, m.maxSlots = dp.ServiceCapacity()
	bes, err := dp.Backends()
	if err != nil {
		return nil, fmt.Errorf("read programmed backends: %w", err)
	}
	for id, b := range bes {
		m.backends[Backend{Addr: b.Addr, Port: b.Port}] = id
		m.byID[id] = Backend{Addr: b.Addr, Port: b.Port}
		m.refs[id] = 0
		m.beIDs.take(id)
	}
	svcs, err := dp.Services()
	if err != nil {
		return nil, fmt.Errorf("read programmed services: %w", err)
	}
	for _, s := range svcs {
		// An adopted frontend holds its programmed backends until its Service's
		// first Apply replaces them: a first Apply that fails (a full map) leaves
		// the Service serving them, never pointing at deleted ids.
		var held []uint32
		for _, id := range s.Backends {
			if _, ok := m.refs[id]; ok {
				held = append(held, id)
				m.refs[id]++
			}
		}
		m.frontends[s.Frontend] = &Applied{Key: s.Frontend, ID: s.ID, Active: held, Type: adoptedType(s.Flags)}
		m.feIDs.take(s.ID)
	}
	m.adopted.adopt(svcs)
	// Ids freed by the previous run that flows still name stay out of use.
	ctSvcs, ctBackends, err := dp.ConntrackIDs()
	if err != nil {
		return nil, fmt.Errorf("read ids named by Service conntrack: %w", err)
	}
	for _, id := range ctSvcs {
		m.feIDs.hold(id)
	}
	for _, id := range ctBackends {
		m.beIDs.hold(id)
	}
	return m, nil
}

// Apply programs exactly fes for the Service named service (namespace/name): new
// and changed frontends are written, the Service's frontends not in fes are removed,
// and backends no frontend refers to any more are deleted; a backend a frontend let go
// that another still lists is recorded as departed from it (Departed). An empty fes
// removes the Service. On error the Service is left partly applied; calling Apply again with the
// same frontends finishes the job.
func (m *Manager) Apply(service string, fes []Frontend) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	defer func() { m.lastApply = time.Since(start) }()

	r := applyRun{service: service, keep: map[datapath.Frontend]bool{}}
	m.writeFrontends(fes, &r)
	m.removeUnkept(&r)
	m.byService[service] = m.byService[service][:0]
	for key := range r.keep {
		m.byService[service] = append(m.byService[service], key)
	}
	if len(m.byService[service]) == 0 {
		delete(m.byService, service)
	}
	r.errs.add(m.release(r.released))
	m.recordDepartures(r.left)
	m.settleIDs()
	if err := r.errs.err(); err != nil || len(r.refused) == 0 {
		return err
	}
	return &HeldError{Service: service, Frontends: r.refused}
}

// applyRun is what one Apply of service gathers: its errors, the externalIPs another
// Service holds, the frontends it keeps, and the backend ids and departures to settle
// once every frontend is written.
type applyRun struct {
	service  string
	errs     errList
	refused  []string
	keep     map[datapath.Frontend]bool
	released []uint32
	left     []Departure
}

// letGo notes that frontend prev (now: what replaced it, nil if none) let its
// backends go: their ids are released, and those now no longer lists departed.
func (r *applyRun) letGo(m *Manager, prev, now *Applied) {
	r.released = append(r.released, prev.backendIDs()...)
	r.left = append(r.left, m.leaving(prev, now)...)
}

// writeFrontends is Apply's first step: every frontend of fes written.
func (m *Manager) writeFrontends(fes []Frontend, r *applyRun) {
	for _, fe := range fes {
		fe.Service = r.service
		r.keep[fe.Key] = true
		prev, err := m.applyFrontend(fe)
		var held *HeldError
		if errors.As(err, &held) {
			r.refused = append(r.refused, held.Frontends...)
			continue
		}
		if err != nil {
			r.errs.add(fmt.Errorf("service %s frontend %s: %w", r.service, FrontendString(fe.Key), err))
			if prev == nil { // not written, or written in part where nothing was
				m.claimAdopted(fe.Key, r.service)
				continue
			}
			// Written in part (acquireBackends): prev's backends are released below.
		}
		if prev != nil {
			r.letGo(m, prev, m.frontends[fe.Key])
		}
	}
}

// removeUnkept is Apply's second step: the Service's frontends not in r.keep are
// removed, unless another Service owns them now.
func (m *Manager) removeUnkept(r *applyRun) {
	for _, key := range m.byService[r.service] {
		if r.keep[key] {
			continue
		}
		if a := m.frontends[key]; a != nil && a.Service != "" && a.Service != r.service {
			m.uncontest(key, r.service)
			continue // another Service owns it now (a reused NodePort or ClusterIP)
		}
		removed, err := m.removeFrontend(key)
		if err != nil {
			r.errs.add(fmt.Errorf("service %s: remove frontend %s: %w", r.service, FrontendString(key), err))
			r.keep[key] = true // still programmed: try again next time
			continue
		}
		if removed != nil {
			r.letGo(m, removed, nil)
		}
		m.reclaimFrom(key, r.service)
	}
}

// settleIDs ends the quarantine of the freed ids no flow names once many wait
// (idSet.crowded): one walk of the Service conntrack maps for freedMax frees at
// least. A walk that fails postpones it (the ids stay in quarantine, as before).
func (m *Manager) settleIDs() {
	if !m.feIDs.crowded() && !m.beIDs.crowded() {
		return
	}
	svcs, bes, err := m.dp.ConntrackIDs()
	if err != nil {
		m.feIDs.postpone()
		m.beIDs.postpone()
		return
	}
	m.feIDs.settle(svcs)
	m.beIDs.settle(bes)
}

// applyFrontend writes one frontend and returns its previous version, nil if there
// was none or it is unchanged: the backend ids it held are released once every
// frontend of the Service is written. A frontend another Service owned gets a new
// id; the old one goes into quarantine.
func (m *Manager) applyFrontend(fe Frontend) (*Applied, error) {
	prev := m.frontends[fe.Key]
	if prev != nil && m.unchanged(prev, fe) {
		return nil, nil // unchanged: an update of another port or field
	}
	takeover := prev != nil && prev.Service != "" && prev.Service != fe.Service
	if err := m.heldOff(prev, fe, takeover); err != nil {
		return nil, err
	}
	fe, ids, partial := m.acquireBackends(fe)
	active, terminating := ids[:len(fe.Active):len(fe.Active)], ids[len(fe.Active):]
	svc, err := m.serviceOf(fe, active)
	if err != nil {
		m.release(ids)
		return nil, err
	}
	if prev != nil && !takeover {
		svc.ID = prev.ID
	} else if svc.ID, err = m.feIDs.next(); err != nil {
		m.release(ids)
		return nil, err
	}
	if m.adopted.take(fe.Key, svc) {
		// Programmed so by the previous run: nothing to write.
	} else if err := m.dp.UpsertService(fe.Key, svc); err != nil {
		if prev == nil || takeover {
			m.feIDs.free(svc.ID)
		}
		m.release(ids)
		return nil, err
	}
	now := &Applied{Key: fe.Key, Service: fe.Service, PortName: fe.PortName, Type: fe.Type,
		Affinity: fe.Affinity, ID: svc.ID, ExternalLocal: fe.ExternalLocal, Local: fe.Local,
		Active: active, Terminating: terminating}
	m.frontends[fe.Key] = now
	m.rejoined(now)
	if prev == nil {
		return nil, partial
	}
	if takeover {
		m.feIDs.free(prev.ID)
		m.contest(fe.Key, prev.Service)
	}
	return prev, partial
}

// acquireBackends takes an id for each backend of fe and returns fe with only the
// backends that got one (Local counting those of them that are local), their ids
// (active, then terminating), and the error of those that did not: a full backend
// map. The frontend is then written with the backends it could keep, never left
// with the old ones: a removed pod's address may be another pod's soon (a full map
// once kept a Service sending to its deleted pods' addresses until it had room).
func (m *Manager) acquireBackends(fe Frontend) (Frontend, []uint32, error) {
	var (
		failed  error // the first backend that did not fit: the others new are not tried
		skipped int
	)
	ids := make([]uint32, 0, len(fe.Active)+len(fe.Terminating))
	take := func(bs []Backend, local int) ([]Backend, int) {
		kept, keptLocal := bs[:0:0], 0
		for i, b := range bs {
			if _, known := m.backends[b]; !known && failed != nil {
				skipped++
				continue
			}
			id, err := m.acquire(b)
			if err != nil {
				failed = err
				skipped++
				continue
			}
			ids = append(ids, id)
			kept = append(kept, b)
			if i < local {
				keptLocal++
			}
		}
		return kept, keptLocal
	}
	fe.Active, fe.Local = take(fe.Active, fe.Local)
	fe.Terminating, _ = take(fe.Terminating, 0)
	if failed != nil {
		return fe, ids, fmt.Errorf("written without %d of its backends, which did not fit: %w", skipped, failed)
	}
	return fe, ids, nil
}

// serviceOf is what the datapath holds for fe, whose active backends have the ids
// active (in order): its flags, its pool for outside clients and its Maglev table;
// the caller sets the id.
func (m *Manager) serviceOf(fe Frontend, active []uint32) (datapath.Service, error) {
	svc := datapath.Service{Backends: active, AffinityTimeout: fe.Affinity}
	switch fe.Type {
	case NodePort:
		svc.Flags |= datapath.ServiceNodePort
	case ExternalIP:
		svc.Flags |= datapath.ServiceExternalIP
	}
	if fe.Affinity > 0 {
		svc.Flags |= datapath.ServiceAffinity
	}
	maglevPool := fe.Active
	if fe.ExternalLocal {
		// The Maglev table is for clients from outside the node, who get the local pool.
		svc.Flags |= datapath.ServiceExternalLocal
		svc.LocalBackends = fe.Local
		maglevPool = fe.Active[:fe.Local]
	}
	table, err := m.maglevTable(maglevPool)
	if err != nil {
		return svc, err
	}
	if table != nil {
		svc.Maglev = make([]uint32, len(table))
		for i, idx := range table {
			svc.Maglev[i] = active[idx]
		}
	}
	return svc, nil
}

// unchanged reports whether a is exactly what fe would program: same Service, port,
// type, affinity, external pool and backends (by the ids they have now) in the same
// order.
func (m *Manager) unchanged(a *Applied, fe Frontend) bool {
	return a.Service == fe.Service && a.PortName == fe.PortName && a.Type == fe.Type && a.Affinity == fe.Affinity &&
		a.ExternalLocal == fe.ExternalLocal && a.Local == fe.Local &&
		m.sameBackends(a.Active, fe.Active) && m.sameBackends(a.Terminating, fe.Terminating)
}

func (m *Manager) sameBackends(ids []uint32, bs []Backend) bool {
	if len(ids) != len(bs) {
		return false
	}
	for i, b := range bs {
		if id, ok := m.backends[b]; !ok || id != ids[i] {
			return false
		}
	}
	return true
}

// backendIDs returns the ids of every backend of a, one per reference it holds.
func (a *Applied) backendIDs() []uint32 { return slices.Concat(a.Active, a.Terminating) }

// removeFrontend deletes frontend key and returns what it was, nil if nothing was
// programmed; the caller releases its backends.
func (m *Manager) removeFrontend(key datapath.Frontend) (*Applied, error) {
	a := m.frontends[key]
	if a == nil {
		return nil, nil // its Apply failed: nothing was programmed
	}
	if err := m.dp.DeleteService(key); err != nil {
		return nil, err
	}
	delete(m.frontends, key)
	m.feIDs.free(a.ID)
	return a, nil
}

// acquire returns b's id, programming the backend when it is new, and counts a reference.
func (m *Manager) acquire(b Backend) (uint32, error) {
	id, ok := m.backends[b]
	if !ok {
		var err error
		if id, err = m.beIDs.next(); err != nil {
			return 0, err
		}
		if err := m.dp.UpsertBackend(id, b); err != nil {
			m.beIDs.free(id)
			return 0, fmt.Errorf("backend %s: %w", b, err)
		}
		m.backends[b] = id
		m.byID[id] = b
	}
	m.refs[id]++
	return id, nil
}

// release drops one reference per id and deletes backends nothing refers to.
func (m *Manager) release(ids []uint32) error {
	var errs errList
	for _, id := range ids {
		m.refs[id]--
		if m.refs[id] > 0 {
			continue
		}
		errs.add(m.deleteBackend(id))
	}
	return errs.err()
}

func (m *Manager) deleteBackend(id uint32) error {
	if err := m.dp.DeleteBackend(id); err != nil {
		m.refs[id] = 0
		return fmt.Errorf("delete backend %d: %w", id, err)
	}
	if b := m.byID[id]; m.backends[b] == id {
		delete(m.backends, b)
	}
	delete(m.byID, id)
	delete(m.refs, id)
	m.beIDs.free(id)
	return nil
}

// Prune removes what no Service claimed since NewManager: frontends of Services
// deleted while the agent was down, and backends nothing refers to. Call it once,
// after the first Apply of every Service that exists.
func (m *Manager) Prune() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.adopted = nil // what no Service claimed is removed below; the rest was applied
	var errs errList
	var released []uint32
	var left []Departure
	for key, a := range m.frontends {
		if a.Service != "" {
			continue
		}
		removed, err := m.removeFrontend(key)
		if err != nil {
			errs.add(fmt.Errorf("remove stale frontend %s: %w", FrontendString(key), err))
		}
		if removed != nil {
			released = append(released, removed.backendIDs()...)
			left = append(left, m.leaving(removed, nil)...)
			m.reclaimFrom(key, "") // an externalIP held off it is handed back
		}
	}
	errs.add(m.release(released))
	m.recordDepartures(left)
	for id, n := range m.refs {
		if n <= 0 {
			errs.add(m.deleteBackend(id))
		}
	}
	return errs.err()
}
