package agent

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/ipam"
)

// duringLookup is a fakeNode whose veth look-up first runs a function once: what
// happens while the agent carries out a recorded delete.
type duringLookup struct {
	*fakeNode
	once func()
}

func (d *duringLookup) IfIndex(name string) (int, error) {
	if f := d.once; f != nil {
		d.once = nil
		f()
	}
	return d.fakeNode.IfIndex(name)
}

// A record the plugin writes for a container while the agent carries out an earlier
// record of it is not removed with the earlier one: the next round carries it out.
func TestDeletedRecordWrittenWhileCarriedOutSurvives(t *testing.T) {
	dir := t.TempDir()
	pool, err := ipam.OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix("10.244.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	node := &duringLookup{fakeNode: &fakeNode{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}}
	eps := endpoint.NewManager(endpoint.Config{Dir: filepath.Join(dir, "endpoints"), Node: "n1"}, node, node, pool)
	alloc := registerTestEndpoint(t, eps, node.links, "a")
	delete(node.links, alloc.HostIfName) // CNI DEL removed the veth, the agent away
	socket := filepath.Join(dir, "myelin.sock")
	deleted := api.DeletedDir(socket)
	if err := api.WriteDeleted(deleted, api.DeletedEndpoint{ContainerID: "a", HostIfName: alloc.HostIfName,
		HostIfIndex: 7, Deleted: time.Now()}); err != nil {
		t.Fatal(err)
	}
	second := api.DeletedEndpoint{ContainerID: "a", HostIfName: alloc.HostIfName, HostIfIndex: 9, Deleted: time.Now()}
	node.once = func() {
		if err := api.WriteDeleted(deleted, second); err != nil {
			t.Error(err)
		}
	}
	d := &deletedLoop{socket: socket, eps: eps, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := d.processDeleted(); err != nil {
		t.Fatal(err)
	}
	if _, ok := eps.Get("a"); ok {
		t.Error("the first record was not carried out: a's endpoint is still there")
	}
	recs, err := api.ReadDeleted(deleted)
	if err != nil || len(recs) != 1 || recs[api.DeletedPath(deleted, "a")].HostIfIndex != 9 {
		t.Errorf("records after the round = %+v, %v; want the one written meanwhile (index 9)", recs, err)
	}
	if err := d.processDeleted(); err != nil {
		t.Fatal(err)
	}
	if recs, err := api.ReadDeleted(deleted); err != nil || len(recs) != 0 {
		t.Errorf("records after the next round = %+v, %v; want none", recs, err)
	}
}

// A round of recorded deletes removes the temporary files a plugin killed mid-write
// left in their directory, once they are older than deletedTempAge; a recent one may
// be a DEL's write under way and stays.
func TestDeletedRoundRemovesCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "myelin.sock")
	deleted := api.DeletedDir(socket)
	if err := os.MkdirAll(deleted, 0o700); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(deleted, ".tmp-00000000000000aa"), filepath.Join(deleted, ".tmp-00000000000000bb")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * deletedTempAge)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	pool, err := ipam.OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix("10.244.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	eps := endpoint.NewManager(endpoint.Config{Dir: filepath.Join(dir, "endpoints"), Node: "n1"}, node, node, pool)
	d := &deletedLoop{socket: socket, eps: eps, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := d.processDeleted(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the crashed write's %s is still there (%v)", old, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the recent %s, a write perhaps under way, was removed: %v", fresh, err)
	}
}
