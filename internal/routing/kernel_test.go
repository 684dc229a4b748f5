package routing

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/myelin-net/myelin/internal/testenv"
)

// inScratchNetns runs fn on a locked thread inside a new netns myelin-rtest-<random>,
// deleted afterwards; the thread is never handed back to the scheduler. fn reports
// with t.Error.
func inScratchNetns(t *testing.T, fn func()) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "myelin-rtest-" + hex.EncodeToString(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		ns, err := netns.NewNamed(name)
		if err != nil {
			t.Errorf("create netns %s: %v", name, err)
			return
		}
		defer func() {
			ns.Close()
			if err := netns.DeleteNamed(name); err != nil {
				t.Errorf("delete netns %s: %v", name, err)
			}
		}()
		fn()
	}()
	<-done
}

// A pod's route takes the node IP as its source, so the node's own connections
// to the pod (kubelet probes) come from the address NetworkPolicy exempts, on a
// node whose lo has a global address (a BGP loopback), which the kernel picks
// without it. A source that is not the node's leaves the route without one.
func TestPrivilegedPodRouteSource(t *testing.T) {
	testenv.RequireRoot(t, "create a network namespace")
	nodeIP, loopback, pod := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.244.0.7")
	inScratchNetns(t, func() {
		must := func(what string, err error) bool {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			return err == nil
		}
		lo, err := netlink.LinkByName("lo")
		if !must("lo", err) || !must("lo up", netlink.LinkSetUp(lo)) ||
			!must("loopback address", netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: loopback.AsSlice(), Mask: net.CIDRMask(32, 32)}})) {
			return
		}
		veth := func(name string) netlink.Link {
			l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
			if !must("add "+name, netlink.LinkAdd(l)) || !must(name+" up", netlink.LinkSetUp(l)) {
				return nil
			}
			return l
		}
		uplink, host := veth("myelin-up"), veth("myelin-h1")
		if uplink == nil || host == nil ||
			!must("node address", netlink.AddrAdd(uplink, &netlink.Addr{IPNet: &net.IPNet{IP: nodeIP.AsSlice(), Mask: net.CIDRMask(24, 32)}})) {
			return
		}
		idx := host.Attrs().Index
		source := func() netip.Addr {
			routes, err := netlink.RouteGet(pod.AsSlice())
			if !must("route get", err) || len(routes) != 1 {
				return netip.Addr{}
			}
			a, _ := netip.AddrFromSlice(routes[0].Src)
			return a.Unmap()
		}
		for _, c := range []struct {
			name string
			k    Kernel
			want netip.Addr
		}{
			{"no source: the kernel picks lo's global address", Kernel{}, loopback},
			{"the node IP as the source", Kernel{PodRouteSrc: nodeIP}, nodeIP},
			{"not an address of the node: left out", Kernel{PodRouteSrc: netip.MustParseAddr("10.9.9.9")}, loopback},
		} {
			if !must(c.name+": replace", c.k.ReplacePodRoute(pod, idx)) {
				continue
			}
			if got := source(); got != c.want {
				t.Errorf("%s: the node's connections to the pod leave from %v, want %v", c.name, got, c.want)
			}
		}
		must("delete", Kernel{}.DeletePodRoute(pod))
		if routes, err := netlink.RouteGet(pod.AsSlice()); err == nil && len(routes) == 1 && routes[0].LinkIndex == idx {
			t.Errorf("the pod's route is still there after DeletePodRoute: %+v", routes[0])
		}
	})
}
