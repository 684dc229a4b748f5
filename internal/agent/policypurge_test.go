package agent

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
)

// diesBeforePurge is the maps of an agent that dies (a SIGTERM, an OOM kill) after
// applyPolicy's writes and before its purge: nothing of the purge reaches the map.
type diesBeforePurge struct{ *fakePolicyMaps }

func (diesBeforePurge) PurgePolicyCT(datapath.PolicyCTPurge) (int, error) {
	return 0, errors.New("the agent died")
}

// A tightened policy's purge survives an agent that dies between the writes and
// the purge: the next agent's maps already hold the new state (no difference), and
// it forgets the connections from the journal.
func TestPolicyPurgeSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy-purge.json")
	m := newFakePolicyMaps()
	wide := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, map[uint32][]datapath.PolicyPort{301: tcp80Only})
	if _, err := applyPolicy(m, &purgeJournal{path: path}, wide, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after an apply whose purge ran: %v, want none", err)
	}
	m.purges = nil
	narrow := serverState(map[netip.Addr]uint32{podX: 300, podY: 301}, nil) // y is no longer allowed into x
	if _, err := applyPolicy(diesBeforePurge{m}, &purgeJournal{path: path}, narrow, nil, nil); err == nil {
		t.Fatal("the dying apply reported no error")
	}

	restarted := &purgeJournal{path: path}
	if _, err := applyPolicy(m, restarted, narrow, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(m.purges) != 1 || !m.purges[0].Endpoints[podX] {
		t.Fatalf("the restarted agent purged %v, want x's connections (from the journal)", m.purges)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal after its purge ran: %v, want it removed", err)
	}
	m.purges = nil
	if _, err := applyPolicy(m, restarted, narrow, nil, nil); err != nil || len(m.purges) != 0 {
		t.Errorf("the next apply purged %v (err %v), want nothing", m.purges, err)
	}
}

// A journal that can't be read may have named any connection: every one is
// forgotten (judged by the policy again), the error says so, and the journal is
// gone afterwards.
func TestPolicyPurgeUnreadableJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy-purge.json")
	if err := os.WriteFile(path, []byte("{\"endpoints\": [\"10.244"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newFakePolicyMaps()
	st := serverState(map[netip.Addr]uint32{podX: 300}, nil)
	j := &purgeJournal{path: path}
	_, err := applyPolicy(m, j, st, nil, nil)
	if err == nil {
		t.Error("an unreadable journal reported no error")
	}
	all := netip.MustParsePrefix("0.0.0.0/0")
	if len(m.purges) != 1 || !slices.Contains(m.purges[0].Prefixes, all) {
		t.Errorf("purges %v, want every connection (%v)", m.purges, all)
	} else if m.purges[0].Allowed != nil {
		t.Error("the purge standing for an unreadable journal judges ends again: it stands for /32 changes too, which are never kept")
	}
	m.purges = nil
	if _, err := applyPolicy(m, j, st, nil, nil); err != nil || len(m.purges) != 0 {
		t.Errorf("after the purge: purges %v, err %v; want none", m.purges, err)
	}
}

// The journal keeps every part of a purge, the pods gone with it.
func TestPolicyPurgeJournalRoundTrip(t *testing.T) {
	j := &purgeJournal{path: filepath.Join(t.TempDir(), "policy-purge.json")}
	want := datapath.PolicyCTPurge{Endpoints: map[netip.Addr]bool{podX: true}, Peers: map[netip.Addr]bool{podY: true},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}, Gone: map[netip.Addr]bool{podY: true}}
	if err := j.record(want); err != nil {
		t.Fatal(err)
	}
	got, err := (&purgeJournal{path: j.path}).pending()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Endpoints, want.Endpoints) || !maps.Equal(got.Peers, want.Peers) ||
		!slices.Equal(got.Prefixes, want.Prefixes) || !maps.Equal(got.Gone, want.Gone) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	if merged := mergePurges(datapath.PolicyCTPurge{Peers: map[netip.Addr]bool{podX: true}}, got); !merged.Gone[podY] {
		t.Errorf("merged with another purge: gone %v, want y", merged.Gone)
	}
}
