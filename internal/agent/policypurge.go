package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"slices"

	"github.com/myelin-net/myelin/internal/datapath"
)

// purgeJournal keeps the tracked connections an apply must forget on disk from
// before its first write until they are forgotten (applyPolicy). The purge is
// computed from the difference between the maps and the new state and runs after
// the writes; an agent that dies in between (a SIGTERM during a rollout, an OOM
// kill) leaves maps that already hold the new state, so the next agent finds no
// difference, and connections a tightened policy no longer allows would stay
// tracked until they close. The next apply reads the journal and forgets them
// too. A purge that fails stays in the journal for the next apply (every minute
// at the latest). The zero value (no path) keeps nothing: for tests of the rest.
type purgeJournal struct {
	path string
	// absent says the file is known not to exist (this process is its only
	// writer), so an apply with nothing to purge reads nothing.
	absent bool
}

// purgeFile is the journal's format.
type purgeFile struct {
	Endpoints []netip.Addr   `json:"endpoints,omitempty"`
	Peers     []netip.Addr   `json:"peers,omitempty"`
	Prefixes  []netip.Prefix `json:"prefixes,omitempty"`
	Gone      []netip.Addr   `json:"gone,omitempty"`
}

// purgeAll names every tracked connection: an unreadable journal may have
// named any.
var purgeAll = datapath.PolicyCTPurge{Prefixes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}

// pending returns what an earlier apply left to purge. An unreadable journal
// yields purgeAll with the error: forgetting every tracked connection is the
// safe side (their next packets are judged by the policy again).
func (j *purgeJournal) pending() (datapath.PolicyCTPurge, error) {
	if j.path == "" || j.absent {
		return datapath.PolicyCTPurge{}, nil
	}
	b, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		j.absent = true
		return datapath.PolicyCTPurge{}, nil
	}
	var f purgeFile
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return purgeAll, fmt.Errorf("read the pending purge of tracked policy connections %s: %w (forgetting every tracked connection instead)", j.path, err)
	}
	p := datapath.PolicyCTPurge{Endpoints: map[netip.Addr]bool{}, Peers: map[netip.Addr]bool{}, Prefixes: f.Prefixes, Gone: map[netip.Addr]bool{}}
	for _, a := range f.Endpoints {
		p.Endpoints[a] = true
	}
	for _, a := range f.Peers {
		p.Peers[a] = true
	}
	for _, a := range f.Gone {
		p.Gone[a] = true
	}
	return p, nil
}

// record writes p as pending (nothing when it is empty).
func (j *purgeJournal) record(p datapath.PolicyCTPurge) error {
	if j.path == "" || p.Empty() {
		return nil
	}
	f := purgeFile{Endpoints: slices.SortedFunc(maps.Keys(p.Endpoints), netip.Addr.Compare),
		Peers: slices.SortedFunc(maps.Keys(p.Peers), netip.Addr.Compare), Prefixes: p.Prefixes,
		Gone: slices.SortedFunc(maps.Keys(p.Gone), netip.Addr.Compare)}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode the pending purge of tracked policy connections: %w", err)
	}
	// Not synced to disk (statefile.Write would cost milliseconds each apply): the
	// journal only has to outlive the agent's process; a power loss also empties
	// the tracked connections, and a file it truncated reads as "purge all".
	tmp := j.path + ".tmp"
	err = os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record the pending purge of tracked policy connections: %w", err)
	}
	j.absent = false
	return nil
}

// done removes the journal once its purge ran.
func (j *purgeJournal) done() error {
	if j.path == "" || j.absent {
		return nil
	}
	if err := os.Remove(j.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the done purge of tracked policy connections: %w", err)
	}
	j.absent = true
	return nil
}

// mergePurges is everything a or b names.
func mergePurges(a, b datapath.PolicyCTPurge) datapath.PolicyCTPurge {
	if b.Empty() {
		return a
	}
	if a.Empty() {
		return b
	}
	out := datapath.PolicyCTPurge{Endpoints: maps.Clone(a.Endpoints), Peers: maps.Clone(a.Peers), Prefixes: slices.Clone(a.Prefixes),
		Gone: maps.Clone(a.Gone)}
	if out.Endpoints == nil {
		out.Endpoints = map[netip.Addr]bool{}
	}
	if out.Peers == nil {
		out.Peers = map[netip.Addr]bool{}
	}
	if out.Gone == nil {
		out.Gone = map[netip.Addr]bool{}
	}
	maps.Copy(out.Endpoints, b.Endpoints)
	maps.Copy(out.Peers, b.Peers)
	maps.Copy(out.Gone, b.Gone)
	for _, p := range b.Prefixes {
		if !slices.Contains(out.Prefixes, p) {
			out.Prefixes = append(out.Prefixes, p)
		}
	}
	return out
}
