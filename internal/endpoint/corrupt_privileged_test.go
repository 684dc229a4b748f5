package endpoint_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// TestPrivilegedRestartWithACorruptRecord: an agent restarts and finds one endpoint
// record truncated. It adopts the other endpoint, leaves the corrupt one's veth up and
// its IP held (its pod keeps its eth0: no sweep or reaper touches it), names the file;
// a CNI DEL of that pod then removes its veth, IP and record as usual.
func TestPrivilegedRestartWithACorruptRecord(t *testing.T) {
	testenv.RequireRoot(t, "create network namespaces")
	n := &podNode{t: t, host: scratchNetNS(t, "host"), pod: scratchNetNS(t, "pod"), dir: t.TempDir()}
	other := &podNode{t: t, host: n.host, pod: scratchNetNS(t, "bad"), dir: n.dir}
	err := netns.Do(n.host, func() error {
		m := n.manager()
		good, err := n.add(m, "ctr-good")
		if err != nil {
			return err
		}
		bad, err := other.add(m, "ctr-bad")
		if err != nil {
			return err
		}
		record := filepath.Join(n.dir, "endpoints", api.RecordFileName("ctr-bad"))
		if err := os.WriteFile(record, []byte(`{"containerID":"ctr-bad","ip":"10.2`), 0o600); err != nil {
			return err
		}

		m2 := n.manager() // the agent restarted
		adopted, removed, err := m2.Restore()
		if adopted != 1 || removed != 0 || err == nil || !strings.Contains(err.Error(), record) {
			t.Errorf("Restore = %d adopted, %d removed, %v; want 1, 0 and an error naming %s", adopted, removed, err, record)
		}
		if got, ok := m2.Get(good.ContainerID); !ok || got.HostIfIndex != good.HostIfIndex {
			t.Errorf("the good endpoint after restart: %+v %v", got, ok)
		}
		if l, err := netlink.LinkByIndex(bad.HostIfIndex); err != nil || l.Attrs().Flags&net.FlagUp == 0 || other.podEth0() == nil {
			t.Errorf("the corrupt record's veth after restart: %v %v, pod eth0 %v; want it up", attrs(l), err, attrs(other.podEth0()))
		}
		if p := m2.Reaper().Pending(); len(p) != 0 {
			t.Errorf("veths queued for deletion after restart: %v, want none", p)
		}
		if alloc, err := m2.Allocate(api.PodRef{ContainerID: "ctr-new"}); err != nil || alloc.IP == bad.IP || alloc.IP == good.IP {
			t.Errorf("a new pod after restart got %v, %v; want an address neither pod has", alloc.IP, err)
		}

		if err := m2.DeleteOwned(bad.ContainerID, bad.HostIfIndex); err != nil {
			return err
		}
		if err := n.reapOne(m2); err != nil {
			return err
		}
		if _, err := netlink.LinkByIndex(bad.HostIfIndex); err == nil {
			t.Error("the deleted pod's veth is still there after the reaper")
		}
		if _, err := os.Stat(record); !os.IsNotExist(err) {
			t.Errorf("the corrupt record after DEL: %v, want it removed", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
