package service

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// kubeDNSAndEvil is a Manager with kube-dns's ClusterIP programmed (dns) and a
// tenant's externalIP frontend on the same address and port (evil), not applied.
func kubeDNSAndEvil(t *testing.T) (*fakeDatapath, *Manager, Frontend, Frontend) {
	t.Helper()
	dp := newFake()
	m, _ := NewManager(dp, 0)
	dns := frontend("10.96.0.10", 53, "10.244.1.5:53")
	if err := m.Apply("kube-system/kube-dns", []Frontend{dns}); err != nil {
		t.Fatal(err)
	}
	evil := frontend("10.96.0.10", 53, "10.244.9.9:53")
	evil.Type = ExternalIP
	return dp, m, dns, evil
}

// An externalIP takes no frontend another Service holds (CVE-2020-8554 against
// kube-dns's ClusterIP, another's NodePort or externalIP): it is refused, the holder
// keeps serving, nothing is retried, and once the holder lets the frontend go the
// claimant is handed back (Reclaims) and programmed. A ClusterIP reused by a new
// Service still takes its frontend from whoever holds it (the last writer).
func TestManagerContestedFrontendReclaimed(t *testing.T) {
	dp, m, dns, evil := kubeDNSAndEvil(t)
	var held *HeldError
	if err := m.Apply("tenant/evil", []Frontend{evil}); !errors.As(err, &held) || len(held.Frontends) != 1 {
		t.Fatalf("an externalIP on kube-dns's ClusterIP: %v, want a HeldError naming it", err)
	}
	if got := dp.active(t, dns.Key); !slices.Equal(got, []string{"10.244.1.5:53"}) {
		t.Errorf("kube-dns's ClusterIP serves %v, want 10.244.1.5:53", got)
	}
	other := frontend("203.0.113.7", 80, "10.244.1.6:80")
	other.Type = ExternalIP
	if err := m.Apply("tenant/first", []Frontend{other}); err != nil {
		t.Fatal(err)
	}
	second := frontend("203.0.113.7", 80, "10.244.9.9:80")
	second.Type = ExternalIP
	if err := m.Apply("tenant/second", []Frontend{second}); !errors.As(err, &held) {
		t.Errorf("a second externalIP claim of one address and port: %v, want a HeldError (the first keeps it)", err)
	}
	if got := dp.active(t, other.Key); !slices.Equal(got, []string{"10.244.1.6:80"}) {
		t.Errorf("the first externalIP serves %v, want its own backend", got)
	}
	if err := m.Apply("kube-system/kube-dns", nil); err != nil { // kube-dns let go
		t.Fatal(err)
	}
	if got := m.Reclaims(); !slices.Equal(got, []string{"tenant/evil"}) {
		t.Fatalf("reclaims after the holder let go: %v, want tenant/evil", got)
	}
	if err := m.Apply("tenant/evil", []Frontend{evil}); err != nil { // what the watcher does
		t.Fatal(err)
	}
	if got := dp.active(t, dns.Key); !slices.Equal(got, []string{"10.244.9.9:53"}) {
		t.Errorf("the freed address serves %v, want the externalIP's backend", got)
	}
	if err := m.Apply("kube-system/kube-dns", []Frontend{dns}); err != nil { // the ClusterIP given again
		t.Fatal(err)
	}
	if err := m.Apply("tenant/evil", []Frontend{evil}); !errors.As(err, &held) { // its resync
		t.Errorf("the externalIP's resync after a ClusterIP took the address: %v, want a HeldError", err)
	}
	if got := dp.active(t, dns.Key); !slices.Equal(got, []string{"10.244.1.5:53"}) {
		t.Errorf("kube-dns's ClusterIP serves %v after the externalIP's resync, want 10.244.1.5:53", got)
	}
	// A displaced Service deleted meanwhile is not handed back.
	if err := m.Apply("tenant/evil", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("kube-system/kube-dns", nil); err != nil {
		t.Fatal(err)
	}
	if got := m.Reclaims(); len(got) != 0 {
		t.Errorf("reclaims for a deleted Service: %v", got)
	}
}

// A Service whose new backends don't fit (a full backend map: another Service author
// filled it) is written with the backends it can keep, never left sending to the
// ones it lost: a deleted pod's address may be another pod's soon. The next Apply,
// with the old ones released, writes the rest.
func TestManagerFullBackendMapDropsRemovedBackends(t *testing.T) {
	dp := &backendCap{fakeDatapath: newFake(), max: 3}
	m, _ := NewManager(dp, 0)
	x := frontend("10.96.0.41", 80, "10.244.3.1:80", "10.244.3.2:80", "10.244.3.3:80")
	if err := m.Apply("b/x", []Frontend{x}); err != nil {
		t.Fatal(err)
	}
	rolled := frontend("10.96.0.41", 80, "10.244.3.3:80", "10.244.3.4:80", "10.244.3.5:80") // .1 and .2 deleted
	if err := m.Apply("b/x", []Frontend{rolled}); err == nil || !strings.Contains(err.Error(), "without 2 of its backends") {
		t.Fatalf("an Apply whose new backends don't fit: %v, want an error naming the 2 left out", err)
	}
	if got := dp.active(t, x.Key); !slices.Equal(got, []string{"10.244.3.3:80"}) {
		t.Errorf("b/x serves %v with a full map, want only the backend it keeps (10.244.3.3:80), none it lost", got)
	}
	if err := m.Apply("b/x", []Frontend{rolled}); err != nil { // the retry
		t.Fatal(err)
	}
	if got := dp.active(t, x.Key); !slices.Equal(got, []string{"10.244.3.3:80", "10.244.3.4:80", "10.244.3.5:80"}) {
		t.Errorf("b/x serves %v after the retry, want its three backends", got)
	}
	if len(dp.backends) != 3 {
		t.Errorf("%d backends programmed, want 3", len(dp.backends))
	}
}

// Right after a restart every frontend is adopted, claimed by no Service yet: an
// externalIP applied before kube-dns still takes no ClusterIP (its type comes from
// the datapath's flags), and once Prune removes an adopted frontend no Service
// claimed (kube-dns deleted while the agent was down), the externalIP held off it
// is handed back.
func TestManagerExternalIPHeldOffAdoptedFrontend(t *testing.T) {
	dp, _, dns, evil := kubeDNSAndEvil(t)
	var held *HeldError
	m2, err := NewManager(dp, 0) // the agent restarts
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply("tenant/evil", []Frontend{evil}); !errors.As(err, &held) {
		t.Fatalf("an externalIP on the adopted ClusterIP of kube-dns: %v, want a HeldError", err)
	}
	if got := dp.active(t, dns.Key); !slices.Equal(got, []string{"10.244.1.5:53"}) {
		t.Errorf("kube-dns's ClusterIP serves %v after the restart, want 10.244.1.5:53", got)
	}
	if err := m2.Prune(); err != nil { // kube-dns was deleted while the agent was down
		t.Fatal(err)
	}
	if got := m2.Reclaims(); !slices.Equal(got, []string{"tenant/evil"}) {
		t.Fatalf("reclaims after Prune removed the adopted frontend: %v, want tenant/evil", got)
	}
	if err := m2.Apply("tenant/evil", []Frontend{evil}); err != nil {
		t.Fatal(err)
	}
	if got := dp.active(t, evil.Key); !slices.Equal(got, []string{"10.244.9.9:53"}) {
		t.Errorf("the freed address serves %v, want the externalIP's backend", got)
	}
}

// A Service created and deleted under ever new names, each refused an externalIP
// another Service holds, leaves no claim behind.
func TestManagerRefusedClaimsForgotten(t *testing.T) {
	_, m, dns, evil := kubeDNSAndEvil(t)
	for i := range 100 {
		name := fmt.Sprintf("tenant/evil-%d", i)
		_ = m.Apply(name, []Frontend{evil})
		if err := m.Apply(name, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.contested[dns.Key]); n != 0 {
		t.Errorf("%d claims kept on kube-dns's address after their Services were deleted, want 0", n)
	}
}

// A new frontend whose backends don't all fit is written with those that do and
// reports the rest, so the watcher retries it.
func TestManagerNewFrontendPartlyWrittenReports(t *testing.T) {
	dp := &backendCap{fakeDatapath: newFake(), max: 2}
	m, _ := NewManager(dp, 0)
	x := frontend("10.96.0.41", 80, "10.244.3.1:80", "10.244.3.2:80", "10.244.3.3:80")
	if err := m.Apply("b/x", []Frontend{x}); err == nil || !strings.Contains(err.Error(), "without 1 of its backends") {
		t.Errorf("a new frontend with one backend too many: %v, want an error naming the one left out", err)
	}
	if got := dp.active(t, x.Key); len(got) != 2 {
		t.Errorf("b/x serves %v, want the two that fit", got)
	}
}
