package service

import (
	"slices"

	"github.com/myelin-net/myelin/internal/datapath"
)

// adoptedState is what the previous agent left programmed for each frontend, kept
// from NewManager until the frontend's first Apply: after a restart almost every
// Service is unchanged, and writing it again (slots, entry, cleanup: ~5 syscalls a
// frontend, 50,000 for 10,000 Services) is most of the time to program them. A
// frontend whose first Apply finds its entry already equal is not written.
type adoptedState map[datapath.Frontend]datapath.ServiceEntry

// adopt records every programmed entry.
func (a adoptedState) adopt(entries []datapath.ServiceEntry) {
	for _, e := range entries {
		a[e.Frontend] = e
	}
}

// take removes and reports whether key is programmed exactly as s: same id, flags,
// local pool, affinity and backend slots, with random selection on both sides (a Maglev table
// is in memory only after a write, so a Maglev frontend is always written again).
func (a adoptedState) take(key datapath.Frontend, s datapath.Service) bool {
	e, ok := a[key]
	if !ok {
		return false
	}
	delete(a, key)
	return !e.HasMaglev && s.Maglev == nil && e.ID == s.ID && e.Flags == s.Flags &&
		e.LocalBackends == s.LocalBackends && e.AffinityTimeout == s.AffinityTimeout &&
		slices.Equal(e.Backends, s.Backends)
}
