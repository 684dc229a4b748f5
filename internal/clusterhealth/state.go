package clusterhealth

import (
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/myelin-net/myelin/internal/api"
)

// Result is the outcome of one probe of one path.
type Result struct {
	At      time.Time
	Latency time.Duration // of a success
	Err     error         // nil: success
}

// record moves a path's state by one probe result: unknown → ok or failing; a change
// between ok and failing restarts Since; a failure is remembered (time and error)
// after the path recovers, so an operator sees a flap that is over.
func record(p api.PathHealth, r Result) api.PathHealth {
	state := api.PathOK
	if r.Err != nil {
		state = api.PathFailing
	}
	if p.State != state {
		p.State, p.Since = state, r.At
	}
	p.LastProbe = r.At
	if r.Err != nil {
		p.LastFailure, p.LastError = r.At, r.Err.Error()
		p.LatencySeconds = 0
	} else {
		p.LatencySeconds = r.Latency.Seconds()
	}
	return p
}

// Peer is a node to probe: its name, node IP and health address (invalid when the
// node has no PodCIDR yet).
type Peer struct {
	Name     string
	NodeIP   netip.Addr
	HealthIP netip.Addr
}

// Paths a peer is probed on.
type pathKind int

const (
	pathICMP pathKind = iota
	pathNodeHTTP
	pathPodHTTP
)

// Matrix is the state of every peer's paths. Safe for concurrent use.
type Matrix struct {
	mu    sync.Mutex
	peers map[string]api.PeerHealth
}

// NewMatrix returns an empty matrix.
func NewMatrix() *Matrix { return &Matrix{peers: map[string]api.PeerHealth{}} }

// SetPeers makes the matrix hold exactly peers, as of now: a new peer (or one whose
// addresses changed) starts unknown, a peer no longer listed is dropped, the others
// keep their state.
func (m *Matrix) SetPeers(peers []Peer, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	keep := make(map[string]api.PeerHealth, len(peers))
	for _, p := range peers {
		nodeIP, healthIP := p.NodeIP.String(), ""
		if p.HealthIP.IsValid() {
			healthIP = p.HealthIP.String()
		}
		old, ok := m.peers[p.Name]
		if ok && old.NodeIP == nodeIP && old.HealthIP == healthIP {
			keep[p.Name] = old
			continue
		}
		unknown := api.PathHealth{State: api.PathUnknown, Since: now}
		keep[p.Name] = api.PeerHealth{Name: p.Name, NodeIP: nodeIP, HealthIP: healthIP, ICMP: unknown, NodeHTTP: unknown, PodHTTP: unknown}
	}
	m.peers = keep
}

// Record applies one probe result of peer's path; a peer not in the matrix (removed
// while its probe ran) is ignored.
func (m *Matrix) Record(peer string, path pathKind, r Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.peers[peer]
	if !ok {
		return
	}
	switch path {
	case pathICMP:
		p.ICMP = record(p.ICMP, r)
	case pathNodeHTTP:
		p.NodeHTTP = record(p.NodeHTTP, r)
	case pathPodHTTP:
		p.PodHTTP = record(p.PodHTTP, r)
	}
	m.peers[peer] = p
}

// Peers returns every peer's state, by name.
func (m *Matrix) Peers() []api.PeerHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]api.PeerHealth, 0, len(m.peers))
	for _, p := range m.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Summary counts the reachable peers and names the failing ones with the network
// they fail on.
func Summary(peers []api.PeerHealth) api.HealthSummary {
	s := api.HealthSummary{Peers: len(peers)}
	for _, p := range peers {
		if p.Reachable() {
			s.Reachable++
		}
		switch node, pod := p.ViaNode() == api.PathFailing, p.ViaPod() == api.PathFailing; {
		case node && pod:
			s.Failing = append(s.Failing, p.Name+" (node and pod network)")
		case node:
			s.Failing = append(s.Failing, p.Name+" (node network)")
		case pod:
			s.Failing = append(s.Failing, p.Name+" (pod network)")
		}
	}
	return s
}
