package service

import (
	"errors"
	"slices"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
)

// backendCap is fakeDatapath with a backend map of max entries, which refuses new
// keys when full as a BPF hash map does.
type backendCap struct {
	*fakeDatapath
	max int
}

func (c *backendCap) UpsertBackend(id uint32, b datapath.Backend) error {
	if _, ok := c.backends[id]; !ok && len(c.backends) >= c.max {
		return errors.New("update: argument list too long")
	}
	return c.fakeDatapath.UpsertBackend(id, b)
}

// After an agent restart, a Service whose first Apply fails (a full backend map)
// goes on serving the backends the previous run programmed, and Prune keeps its
// frontend: the failure neither deletes its live backends nor the Service.
func TestManagerRestartFailedApplyKeepsServing(t *testing.T) {
	dp := &backendCap{fakeDatapath: newFake(), max: 2}
	m, _ := NewManager(dp, 0)
	x := frontend("10.96.0.41", 80, "10.244.3.1:80")
	if err := m.Apply("b/x", []Frontend{x}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("a/y", []Frontend{frontend("10.96.0.42", 80, "10.244.4.1:80")}); err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(dp, 0) // the agent restarts
	if err != nil {
		t.Fatal(err)
	}
	x.Active = append(x.Active, be("10.244.3.2:80")) // scaled up while it was down: no room
	if err := m2.Apply("b/x", []Frontend{x}); err == nil {
		t.Fatal("the first Apply into a full backend map succeeded")
	}
	if err := m2.Apply("a/y", []Frontend{frontend("10.96.0.42", 80, "10.244.4.1:80")}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := dp.active(t, x.Key); !slices.Equal(got, []string{"10.244.3.1:80"}) {
		t.Errorf("b/x serves %v after its failed first Apply, want the backend it had, 10.244.3.1:80", got)
	}
	// Once there is room, the next Apply takes over and accounts for the old backends.
	dp.max = 3
	if err := m2.Apply("b/x", []Frontend{x}); err != nil {
		t.Fatal(err)
	}
	if got := dp.active(t, x.Key); !slices.Equal(got, []string{"10.244.3.1:80", "10.244.3.2:80"}) {
		t.Errorf("b/x serves %v, want both backends", got)
	}
	if err := m2.Apply("b/x", nil); err != nil {
		t.Fatal(err)
	}
	if len(dp.backends) != 1 {
		t.Errorf("after b/x is deleted %d backends are programmed, want a/y's one", len(dp.backends))
	}
}

// Two Services claiming one frontend (an externalIP on another Service's ClusterIP:
// CVE-2020-8554, or two Services sharing an externalIP): the last writer owns it, and
// when it lets the frontend go, the other is handed back to be applied again
// (Reclaims), instead of the frontend staying deleted for it.
func TestManagerContestedFrontendReclaimed(t *testing.T) {
	dp := newFake()
	m, _ := NewManager(dp, 0)
	dns := frontend("10.96.0.10", 53, "10.244.1.5:53")
	if err := m.Apply("kube-system/kube-dns", []Frontend{dns}); err != nil {
		t.Fatal(err)
	}
	evil := frontend("10.96.0.10", 53, "10.244.9.9:53")
	evil.Type = ExternalIP
	if err := m.Apply("tenant/evil", []Frontend{evil}); err != nil {
		t.Fatal(err)
	}
	if got := m.Reclaims(); len(got) != 0 {
		t.Errorf("reclaims after the takeover: %v, want none", got)
	}
	if err := m.Apply("tenant/evil", nil); err != nil {
		t.Fatal(err)
	}
	if got := m.Reclaims(); !slices.Equal(got, []string{"kube-system/kube-dns"}) {
		t.Fatalf("reclaims after the taker let go: %v, want kube-system/kube-dns", got)
	}
	if err := m.Apply("kube-system/kube-dns", []Frontend{dns}); err != nil { // what the watcher does
		t.Fatal(err)
	}
	if got := dp.active(t, dns.Key); !slices.Equal(got, []string{"10.244.1.5:53"}) {
		t.Errorf("kube-dns's ClusterIP serves %v, want 10.244.1.5:53", got)
	}
	// A displaced Service deleted meanwhile is not handed back.
	if err := m.Apply("tenant/evil", []Frontend{evil}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("kube-system/kube-dns", nil); err != nil { // not the owner: its claim goes
		t.Fatal(err)
	}
	if err := m.Apply("tenant/evil", nil); err != nil {
		t.Fatal(err)
	}
	if got := m.Reclaims(); len(got) != 0 {
		t.Errorf("reclaims for a deleted Service: %v", got)
	}
}
