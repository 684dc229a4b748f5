package endpoint

import (
	"net/netip"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
)

// orderLinks and orderDatapath record the device and TCX operations in the order the
// manager makes them.
type orderLinks struct {
	*fakeLinks
	log *[]string
}

func (o orderLinks) DeleteLink(name string) error {
	*o.log = append(*o.log, "delete-link")
	return o.fakeLinks.DeleteLink(name)
}

type orderDatapath struct {
	*fakeDatapath
	log *[]string
}

func (o orderDatapath) DetachEndpoint(name string) error {
	*o.log = append(*o.log, "detach")
	return o.fakeDatapath.DetachEndpoint(name)
}

// A delete removes the host veth before it detaches the programs (detaching from a
// live device costs a grace period per link, from a deleted one nothing), and still
// removes everything of the endpoint.
func TestManagerDeletesLinkBeforeDetach(t *testing.T) {
	var log []string
	dp := &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	links := &fakeLinks{map[string]int{}, map[netip.Addr]int{}}
	f := newFixture(t, t.TempDir(), dp, links)
	f.m = NewManager(f.m.cfg, orderDatapath{dp, &log}, orderLinks{links, &log}, f.pool)
	ep := f.add(t, "a", 7)
	if err := f.m.DeleteOwned("a", ep.HostIfIndex); err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0] != "delete-link" || log[1] != "detach" {
		t.Errorf("delete made %v, want [delete-link detach]", log)
	}
	if _, ok := f.m.Get("a"); ok || len(dp.eps) != 0 || len(links.links) != 0 || len(links.routes) != 0 || len(dp.attached) != 0 {
		t.Errorf("delete left record %v map %v links %v routes %v attached %v", ok, dp.eps, links.links, links.routes, dp.attached)
	}
	if _, owned := f.pool.Lookup("a"); owned {
		t.Error("delete left the IP allocated")
	}
}
