package endpoint

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

func emptyFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixture(t, t.TempDir(), &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}},
		newFakeLinks())
}

// intact fails unless ep's map entry, route, veth and IP are all still there.
func (f *fixture) intact(t *testing.T, what string, ep api.Endpoint) {
	t.Helper()
	ip := netip.MustParseAddr(ep.IP)
	owned, _ := f.pool.Lookup(ep.ContainerID)
	if f.dp.eps[ip].IfIndex != ep.HostIfIndex || f.links.routes[ip] != ep.HostIfIndex ||
		f.links.links[ep.HostIfName] != ep.HostIfIndex || owned != ip {
		t.Errorf("%s: %s lost something: map %v routes %v links %v IP %v", what, ep.ContainerID, f.dp.eps, f.links.routes, f.links.links, owned)
	}
	if _, ok := f.m.Get(ep.ContainerID); !ok {
		t.Errorf("%s: record of %s gone", what, ep.ContainerID)
	}
}

// A delete that names another host veth than the record's is refused.
func TestManagerDeleteOwned(t *testing.T) {
	f := emptyFixture(t)
	ep := f.add(t, "a", 7)
	if err := f.m.DeleteOwned("a", 9); !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("DeleteOwned with another ifindex = %v, want ErrNotOwner", err)
	}
	f.intact(t, "after a foreign delete", ep)
	if err := f.m.DeleteOwned("a", 7); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.m.Get("a"); ok || len(f.dp.eps) != 0 {
		t.Errorf("owner's delete left record %v map %v", ok, f.dp.eps)
	}
	f.retired(t, ep.HostIfName, 7)
}

// Deleting a stale endpoint whose address another pod has now (a reused IP) leaves
// that pod's map entry and route alone, whether the map says so or another record does.
func TestManagerStaleDeleteKeepsReusedIP(t *testing.T) {
	f := emptyFixture(t)
	stale := f.add(t, "stale", 7)
	ip := netip.MustParseAddr(stale.IP)
	// The address now leads to another pod's veth 8 (state drift after a lost IPAM file).
	f.dp.eps[ip] = datapath.EndpointInfo{IfIndex: 8}
	f.links.routes[ip] = 8
	if err := f.m.Delete("stale"); err != nil {
		t.Fatal(err)
	}
	if f.dp.eps[ip].IfIndex != 8 || f.links.routes[ip] != 8 {
		t.Errorf("stale delete removed the other pod's entry or route: map %v routes %v", f.dp.eps, f.links.routes)
	}

	// Two records claim one address: deleting one keeps what the other needs.
	g := emptyFixture(t)
	a := g.add(t, "a", 7)
	g.m.eps["b"] = &api.Endpoint{PodRef: api.PodRef{ContainerID: "b"}, IP: a.IP, HostIfName: HostIfName("b"), HostIfIndex: 7}
	if err := g.m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	aip := netip.MustParseAddr(a.IP)
	if g.dp.eps[aip].IfIndex != 7 || g.links.routes[aip] != 7 {
		t.Errorf("delete of a removed the address b claims: map %v routes %v", g.dp.eps, g.links.routes)
	}
}

// A veth of the endpoint's name on another index (the name reused by a new
// attachment) is not deleted with the old record.
func TestManagerDeleteKeepsReusedVethName(t *testing.T) {
	f := emptyFixture(t)
	ep := f.add(t, "x", 7)
	f.links.links[ep.HostIfName] = 12
	if err := f.m.Delete("x"); err != nil {
		t.Fatal(err)
	}
	f.reap(t)
	if f.links.links[ep.HostIfName] != 12 || f.links.down[12] {
		t.Errorf("the veth %s of index 12 was deleted or set down with the record of index 7 (down %v)", ep.HostIfName, f.links.down)
	}
}

// A delete recorded by CNI DEL while the agent was away is carried out only for the
// attachment DEL saw, and only once its veth is gone.
func TestManagerDeleteRecorded(t *testing.T) {
	f := emptyFixture(t)
	gone := f.add(t, "gone", 7)
	alive := f.add(t, "alive", 8)
	readded := f.add(t, "readded", 9)
	delete(f.links.links, gone.HostIfName) // DEL removed the veth

	if ok, err := f.m.DeleteRecorded(api.DeletedEndpoint{ContainerID: "gone", HostIfIndex: 7}); err != nil || !ok {
		t.Errorf("DeleteRecorded(gone) = %v, %v; want true", ok, err)
	}
	if _, ok := f.m.Get("gone"); ok {
		t.Error("record of the deleted pod kept")
	}
	if ip, ok := f.pool.Lookup("gone"); ok {
		t.Errorf("IP %v of the deleted pod still allocated", ip)
	}
	if _, ok := f.dp.eps[netip.MustParseAddr(gone.IP)]; ok {
		t.Error("map entry of the deleted pod kept")
	}

	if ok, err := f.m.DeleteRecorded(api.DeletedEndpoint{ContainerID: "alive", HostIfIndex: 8}); err != nil || ok {
		t.Errorf("DeleteRecorded(veth alive) = %v, %v; want false", ok, err)
	}
	f.intact(t, "veth alive", alive)
	if ok, err := f.m.DeleteRecorded(api.DeletedEndpoint{ContainerID: "readded", HostIfIndex: 3}); err != nil || ok {
		t.Errorf("DeleteRecorded(stale index) = %v, %v; want false", ok, err)
	}
	f.intact(t, "stale recorded delete", readded)
	if ok, err := f.m.DeleteRecorded(api.DeletedEndpoint{ContainerID: "unknown"}); err != nil || ok {
		t.Errorf("DeleteRecorded(unknown) = %v, %v; want false, nil", ok, err)
	}
}
