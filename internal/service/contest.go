package service

import (
	"fmt"
	"slices"
	"strings"

	"github.com/myelin-net/myelin/internal/datapath"
)

// Frontends two Services claim (an externalIP on another's ClusterIP, a reused
// NodePort or ClusterIP), adopted frontends, and the Services handed back once the
// holder lets a frontend go.

// HeldError is what Apply returns when the only frontends it could not write are
// externalIPs another Service holds (applyFrontend): nothing to retry; when the
// holder lets one go the Service is handed back (Reclaims).
type HeldError struct {
	Service   string
	Frontends []string // "address:port/proto held by namespace/name's <type>"
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("service %s: externalIP frontends not programmed, another Service holds them: %s",
		e.Service, strings.Join(e.Frontends, ", "))
}

// heldOff returns the HeldError of an externalIP fe on a frontend another holds
// (prev: what holds fe's key; takeover: another Service's), noting fe's Service as a
// claimant handed back when the holder lets go (reclaimFrom). An externalIP takes no
// frontend from another Service: not a ClusterIP or NodePort (the apiserver's
// allocators make those unique: kube-dns, the apiserver's own), not another's
// externalIP (the first keeps it; flipping owners at each resync moved flows to other
// backends). An adopted frontend (the previous run's, no Service has claimed it yet)
// of another type is held as well: right after a restart, a tenant's Service applied
// before kube-dns's would otherwise take its ClusterIP.
func (m *Manager) heldOff(prev *Applied, fe Frontend, takeover bool) error {
	adoptedOther := prev != nil && prev.Service == "" && prev.Type != fe.Type
	if fe.Type != ExternalIP || !(takeover || adoptedOther) {
		return nil
	}
	m.contest(fe.Key, fe.Service)
	holder := prev.Service
	if holder == "" {
		holder = "the previous run"
	}
	return &HeldError{Frontends: []string{fmt.Sprintf("%s held by %s's %s", FrontendString(fe.Key), holder, prev.Type)}}
}

// contest notes service as a claimant of key, which another Service holds.
func (m *Manager) contest(key datapath.Frontend, service string) {
	if !slices.Contains(m.contested[key], service) {
		m.contested[key] = append(m.contested[key], service)
	}
}

// claimAdopted marks the adopted frontend key, if it is one, as service's although
// its Apply failed: it goes on serving what the previous run programmed (with the
// backends it holds), and Prune, which removes what no Service claimed, keeps it.
func (m *Manager) claimAdopted(key datapath.Frontend, service string) {
	if a := m.frontends[key]; a != nil && a.Service == "" {
		claimed := *a
		claimed.Service = service
		m.frontends[key] = &claimed
	}
}

// uncontest forgets service's claim on key, which another Service holds: service
// let it go (a Service created and deleted under ever new names with an externalIP
// on kube-dns's address kept every name).
func (m *Manager) uncontest(key datapath.Frontend, service string) {
	c := slices.DeleteFunc(m.contested[key], func(s string) bool { return s == service })
	if len(c) == 0 {
		delete(m.contested, key)
		return
	}
	m.contested[key] = c
}

// reclaimFrom notes, once service removed frontend key, the Services it had taken
// key from that still claim it: the next Reclaims returns them to be applied again.
func (m *Manager) reclaimFrom(key datapath.Frontend, service string) {
	for _, s := range m.contested[key] {
		if s != service && slices.Contains(m.byService[s], key) && !slices.Contains(m.reclaims, s) {
			m.reclaims = append(m.reclaims, s)
		}
	}
	delete(m.contested, key)
}

// Reclaims returns (and forgets) the Services to apply again because a frontend
// they claim was taken from them and then let go by the Service that took it.
func (m *Manager) Reclaims() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.reclaims
	m.reclaims = nil
	return out
}

// adoptedType is the type of a frontend the previous run programmed, from its flags:
// an externalIP may take no frontend of another type, adopted or not.
func adoptedType(f datapath.ServiceFlags) FrontendType {
	switch {
	case f&datapath.ServiceNodePort != 0:
		return NodePort
	case f&datapath.ServiceExternalIP != 0:
		return ExternalIP
	}
	return ClusterIP
}
