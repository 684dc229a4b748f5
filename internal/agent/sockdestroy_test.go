package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// The closer enters the agent's namespace and every pod's it can see; a pod's netns
// path that is no namespace for the agent (missing: an agent container without the
// runtime's netns directory; a plain file: the runtime's mount did not propagate) is
// left out and logged once while its pod lives, so the operator learns why its
// sockets stay open.
func TestUDPCloserNetnsNotVisible(t *testing.T) {
	dir := t.TempDir()
	eps, _, node := testEndpoints(t, dir)
	put := func(id, netns string) {
		alloc, err := eps.Allocate(api.PodRef{ContainerID: id, Namespace: "x", Pod: id})
		if err != nil {
			t.Fatal(err)
		}
		node.links[alloc.HostIfName] = 7
		if _, err := eps.Put(api.Endpoint{PodRef: api.PodRef{ContainerID: id, Namespace: "x", Pod: id, NetNS: netns}, IP: alloc.IP,
			HostIfName: alloc.HostIfName, HostIfIndex: 7, HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"}); err != nil {
			t.Fatal(err)
		}
	}
	visible, missing := "/proc/self/ns/net", filepath.Join(dir, "netns", "cni-missing")
	unmounted := filepath.Join(dir, "cni-unmounted") // the file, without the runtime's mount on it
	if err := os.WriteFile(unmounted, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	put("a", visible)
	put("b", missing)
	put("c", unmounted)
	var log strings.Builder
	u := newUDPCloser(nil, eps, slog.New(slog.NewTextHandler(&log, nil)))
	for range 2 {
		if got := u.netns(); !slices.Equal(got, []string{"", visible}) {
			t.Errorf("netns() = %q, want the agent's and a's", got)
		}
	}
	if n := strings.Count(log.String(), "not visible to the agent"); n != 1 || !strings.Contains(log.String(), "pods=2") ||
		!strings.Contains(log.String(), "socketLB.netnsPath") {
		t.Errorf("log %q: want one warning counting x/b and x/c, naming socketLB.netnsPath", log.String())
	}
}
