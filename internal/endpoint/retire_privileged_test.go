package endpoint_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/testenv"
)

// nullDatapath accepts everything: these tests are about the veths.
type nullDatapath struct{}

func (nullDatapath) UpsertEndpoint(netip.Addr, datapath.EndpointInfo) error { return nil }
func (nullDatapath) DeleteEndpoint(netip.Addr) error                        { return nil }
func (nullDatapath) DeleteEndpointOf(netip.Addr, int) error                 { return nil }
func (nullDatapath) Endpoints() (map[netip.Addr]datapath.EndpointInfo, error) {
	return nil, nil
}
func (nullDatapath) AttachEndpoint(int, string) error { return nil }
func (nullDatapath) DetachEndpoint(int, string) error { return nil }

// scratchNetNS makes a named netns (eptest-*: not myelin-*, which the lab owns) and
// removes it when the test ends.
func scratchNetNS(t *testing.T, role string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "eptest-" + role + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return "/run/netns/" + name
}

// podNode is a node netns with a manager over the real netlink links.
type podNode struct {
	t         *testing.T
	host, pod string // netns paths
	dir       string
}

func (n *podNode) manager() *endpoint.Manager {
	n.t.Helper()
	pool, err := ipam.OpenPool(filepath.Join(n.dir, "ipam.json"), netip.MustParsePrefix("10.244.9.0/24"))
	if err != nil {
		n.t.Fatal(err)
	}
	return endpoint.NewManager(endpoint.Config{Dir: filepath.Join(n.dir, "endpoints"), Node: "n1", MTU: 1500},
		nullDatapath{}, routing.Kernel{}, pool)
}

// add does what CNI ADD does with the veth (in the host netns): allocate, create the
// pair with eth0 in the pod netns, bring the host side up, register.
func (n *podNode) add(m *endpoint.Manager, id string) (api.Endpoint, error) {
	ref := api.PodRef{ContainerID: id, Namespace: "default", Pod: id}
	alloc, err := m.Allocate(ref)
	if err != nil {
		return api.Endpoint{}, err
	}
	pod, err := vnetns.GetFromPath(n.pod)
	if err != nil {
		return api.Endpoint{}, err
	}
	defer pod.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: alloc.HostIfName}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(pod))}
	if err := netlink.LinkAdd(veth); err != nil {
		return api.Endpoint{}, err
	}
	l, err := netlink.LinkByName(alloc.HostIfName)
	if err != nil {
		return api.Endpoint{}, err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return api.Endpoint{}, err
	}
	return m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: l.Attrs().Index,
		HostMAC: l.Attrs().HardwareAddr.String(), PodMAC: "02:00:00:00:00:02"})
}

// podEth0 returns the pod's eth0, or nil if it has none.
func (n *podNode) podEth0() netlink.Link {
	var l netlink.Link
	_ = netns.Do(n.pod, func() error {
		l, _ = netlink.LinkByName("eth0")
		return nil
	})
	return l
}

// TestPrivilegedRetireRestartReAdd: a deleted endpoint's veth pair stays, down, until
// the reaper deletes it; an agent restarted before that queues it again; a re-ADD of
// the same container id into the same pod netns deletes it first and succeeds; the
// reaper deletes the veth of the next delete, and a veth deleted meanwhile (the pod
// netns went away) is no error.
func TestPrivilegedRetireRestartReAdd(t *testing.T) {
	testenv.RequireRoot(t, "create network namespaces")
	n := &podNode{t: t, host: scratchNetNS(t, "host"), pod: scratchNetNS(t, "pod"), dir: t.TempDir()}
	err := netns.Do(n.host, func() error {
		m := n.manager()
		ep, err := n.add(m, "ctr-1")
		if err != nil {
			return err
		}
		if err := m.Delete("ctr-1"); err != nil {
			return err
		}
		n.checkRetired(ep)

		m2 := n.manager() // the agent restarted before its reaper ran
		if _, _, err := m2.Restore(); err != nil {
			return err
		}
		if p := m2.Reaper().Pending(); len(p) != 1 || p[0] != ep.HostIfName {
			t.Errorf("pending after restart %v, want %s", p, ep.HostIfName)
		}
		again, err := n.add(m2, "ctr-1") // same container id, same pod netns
		if err != nil {
			return err
		}
		if again.HostIfIndex == ep.HostIfIndex || n.podEth0() == nil {
			t.Errorf("re-ADD: host veth index %d (was %d), pod eth0 %v", again.HostIfIndex, ep.HostIfIndex, n.podEth0())
		}
		return n.deleteAndReap(m2, again)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkRetired fails unless ep's host veth is down, listed as a down pod veth, and
// its pod side is still there without carrier.
func (n *podNode) checkRetired(ep api.Endpoint) {
	t := n.t
	l, err := netlink.LinkByName(ep.HostIfName)
	if err != nil || l.Attrs().Index != ep.HostIfIndex || l.Attrs().OperState != netlink.OperDown {
		t.Errorf("retired host veth %s: %v %v, want index %d, down", ep.HostIfName, attrs(l), err, ep.HostIfIndex)
	}
	if down, err := (routing.Kernel{}).DownPodVeths(); err != nil || down[ep.HostIfName] != ep.HostIfIndex {
		t.Errorf("DownPodVeths = %v, %v; want %s at %d", down, err, ep.HostIfName, ep.HostIfIndex)
	}
	if p := n.podEth0(); p == nil || p.Attrs().OperState == netlink.OperUp {
		t.Errorf("pod eth0 of a retired veth: %v, want present without carrier", attrs(p))
	}
}

// deleteAndReap deletes ep's endpoint, runs the reaper (in the host netns, as the
// agent does) until it reports the veth, and checks both ends are gone.
func (n *podNode) deleteAndReap(m *endpoint.Manager, ep api.Endpoint) error {
	if err := m.Delete(ep.ContainerID); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	reported := make(chan error, 1)
	go func() {
		_ = netns.Do(n.host, func() error {
			m.Reaper().Run(ctx, func(a endpoint.Attempt) { reported <- a.Err })
			return nil
		})
	}()
	err := <-reported
	cancel()
	if err != nil {
		return err
	}
	if _, lerr := netlink.LinkByName(ep.HostIfName); lerr == nil || n.podEth0() != nil {
		return errors.New("the reaper left the veth pair of " + ep.HostIfName)
	}
	// Deleting what is gone already (the pod netns took the pair) is no error.
	if err := (routing.Kernel{}).DeleteLinkAt(ep.HostIfIndex, ep.HostIfName); err != nil {
		return err
	}
	return (routing.Kernel{}).SetLinkDown(ep.HostIfIndex)
}

func attrs(l netlink.Link) any {
	if l == nil {
		return nil
	}
	return *l.Attrs()
}
