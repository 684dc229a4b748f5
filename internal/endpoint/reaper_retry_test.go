package endpoint

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, 64 * time.Second},
		{8, 2 * time.Minute}, {9, 2 * time.Minute}, {1000, 2 * time.Minute},
	} {
		if got := retryDelay(c.failures); got != c.want {
			t.Errorf("retryDelay(%d) = %v, want %v", c.failures, got, c.want)
		}
	}
}

// fakeClock is the reaper's clock in these tests: time moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func withClock(f *fixture) *fakeClock {
	c := &fakeClock{t: time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)}
	f.m.reaper.now = c.now
	return c
}

// reapDue runs one pass of the reaper's loop and returns its attempts and when it
// would wake for the next retry.
func reapDue(f *fixture) ([]Attempt, time.Time) {
	var as []Attempt
	next := f.m.reaper.reapDue(func(a Attempt) { as = append(as, a) })
	return as, next
}

// A failed delete stays queued and is tried again once its delay has passed, with
// the delay doubling; a veth whose delete works at last leaves the queue.
func TestReaperRetriesAFailedDelete(t *testing.T) {
	f := emptyFixture(t)
	clock := withClock(f)
	ep := f.add(t, "a", 7)
	if err := f.m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	f.links.failDeletes = 2
	t0 := clock.now()
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		as, next := reapDue(f)
		if len(as) != 1 || as[0].Outcome != Failed || !errors.Is(as[0].Err, errDeleteFailed) ||
			as[0].Failures != i+1 || as[0].RetryIn != want || !next.Equal(clock.now().Add(want)) {
			t.Fatalf("pass %d: attempts %+v next %v, want one failure #%d retried in %v", i+1, as, next.Sub(t0), i+1, want)
		}
		f.retired(t, ep.HostIfName, 7)
		clock.advance(want / 2)
		if as, _ := reapDue(f); len(as) != 0 {
			t.Fatalf("pass %d: tried again before its delay: %+v", i+1, as)
		}
		clock.advance(want / 2)
	}
	as, next := reapDue(f)
	if len(as) != 1 || as[0].Outcome != Deleted || as[0].Err != nil || !next.IsZero() {
		t.Fatalf("third pass: %+v next %v, want the veth deleted and nothing left to retry", as, next)
	}
	if _, ok := f.links.links[ep.HostIfName]; ok || f.m.Reaper().Len() != 0 {
		t.Errorf("after the retry: links %v pending %v", f.links.links, f.m.Reaper().Pending())
	}
}

// A veth that is gone by the time of its retry (the runtime deleted the pod netns and
// the pair with it) counts as deleted.
func TestReaperRetryOfAVethGone(t *testing.T) {
	f := emptyFixture(t)
	clock := withClock(f)
	ep := f.add(t, "a", 7)
	if err := f.m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	f.links.failDeletes = 1
	if as, _ := reapDue(f); len(as) != 1 || as[0].Outcome != Failed {
		t.Fatalf("first pass: %+v, want a failure", as)
	}
	delete(f.links.links, ep.HostIfName)
	clock.advance(retryFirst)
	if as, next := reapDue(f); len(as) != 1 || as[0].Outcome != Deleted || as[0].Err != nil || !next.IsZero() {
		t.Fatalf("retry of a veth gone: %+v next %v, want it done", as, next)
	}
}

// A re-ADD of the same container id deletes the retired veth at once, however long
// its background retry still has to wait; if that fails too, ADD fails and the veth
// stays queued.
func TestReaperReAddAfterAFailedDelete(t *testing.T) {
	f := emptyFixture(t)
	withClock(f)
	old := f.add(t, "a", 7)
	if err := f.m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	f.links.failDeletes = 2
	if as, _ := reapDue(f); len(as) != 1 || as[0].Outcome != Failed {
		t.Fatalf("background pass: %+v, want a failure", as)
	}
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "a"}); !errors.Is(err, errDeleteFailed) {
		t.Fatalf("allocate while the retired veth cannot be deleted: %v, want the delete's error", err)
	}
	f.retired(t, old.HostIfName, 7)
	if _, err := f.m.Allocate(api.PodRef{ContainerID: "a"}); err != nil {
		t.Fatalf("allocate once the delete works: %v", err)
	}
	if _, ok := f.links.links[old.HostIfName]; ok || f.m.Reaper().Len() != 0 {
		t.Errorf("after the re-ADD's allocate: links %v pending %v", f.links.links, f.m.Reaper().Pending())
	}
}

// An ADD in flight across an agent restart: the old agent allocated the IP, the
// plugin created the pair (host side down until it brings it up) and registers it
// with the new agent. The new agent's start-up sweep leaves that veth alone, and so
// does its reaper if the veth was queued anyway; the ADD succeeds with its veth.
func TestRestoreKeepsTheVethOfAnADDInFlight(t *testing.T) {
	dir := t.TempDir()
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := newFakeLinks()
	old := newFixture(t, dir, dp, links)
	ref := api.PodRef{ContainerID: "adding", Namespace: "default", Pod: "adding"}
	alloc, err := old.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	links.links[alloc.HostIfName], links.down[30] = 30, true // created, not up yet
	retiredName := HostIfName("deleted")                     // and one a DEL retired
	links.links[retiredName], links.down[31] = 31, true

	f := newFixture(t, dir, dp, links) // the agent restarted
	withClock(f)
	if _, _, err := f.m.Restore(); err != nil {
		t.Fatal(err)
	}
	if p := f.m.Reaper().Pending(); len(p) != 1 || p[0] != retiredName {
		t.Fatalf("pending after restore %v, want only %s", p, retiredName)
	}
	f.m.reaper.add(alloc.HostIfName, 30) // queued anyway: the reaper asks before it deletes
	as, _ := reapDue(f)
	if len(as) != 2 || links.links[alloc.HostIfName] != 30 {
		t.Fatalf("reaper: %+v, links %v; want %s kept", as, links.links, alloc.HostIfName)
	}
	links.down[30] = false // the plugin brings it up and registers it
	ep, err := f.m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: 30,
		HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"})
	if err != nil {
		t.Fatalf("register the ADD's endpoint with the new agent: %v", err)
	}
	f.intact(t, "endpoint of the ADD in flight", ep)
}

// The reaper asks before each attempt, retries included: an endpoint's veth, or one
// whose container id got an IP since the last attempt (an ADD between allocate and
// register), leaves the queue undeleted.
func TestReaperKeepsAVethSomeoneOwns(t *testing.T) {
	f := emptyFixture(t)
	clock := withClock(f)
	ep := f.add(t, "a", 7)
	f.m.reaper.add(ep.HostIfName, 7)
	if as, _ := reapDue(f); len(as) != 1 || as[0].Outcome != Kept {
		t.Fatalf("attempt on an endpoint's veth: %+v, want it kept", as)
	}
	f.intact(t, "endpoint after the reaper", ep)

	adding := HostIfName("b")
	f.links.links[adding], f.links.down[8] = 8, true
	f.m.reaper.add(adding, 8)
	f.links.failDeletes = 1
	if as, _ := reapDue(f); len(as) != 1 || as[0].Outcome != Failed {
		t.Fatalf("attempt on a veth no one owns: %+v, want the fake's failure", as)
	}
	if _, err := f.pool.Allocate("b", nil); err != nil { // an IP for b, as the previous agent gave it
		t.Fatal(err)
	}
	clock.advance(retryFirst)
	if as, _ := reapDue(f); len(as) != 1 || as[0].Outcome != Kept || f.links.links[adding] != 8 || f.m.Reaper().Len() != 0 {
		t.Fatalf("retry of a veth an ADD now owns: %+v links %v pending %v, want it kept and dequeued", as, f.links.links, f.m.Reaper().Pending())
	}
}
