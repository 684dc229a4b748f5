package endpoint_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// TestPrivilegedADDInFlightAcrossRestart: an agent restarts while a CNI ADD is between
// allocate and register (the old agent gave the IP, the plugin has created the pair,
// its host side still down). The new agent's start-up sweep and reaper delete the
// pair a DEL retired and leave the ADD's alone; the plugin brings it up and registers
// it with the new agent, and the pod keeps its eth0.
func TestPrivilegedADDInFlightAcrossRestart(t *testing.T) {
	testenv.RequireRoot(t, "create network namespaces")
	n := &podNode{t: t, host: scratchNetNS(t, "host"), pod: scratchNetNS(t, "pod"), dir: t.TempDir()}
	other := &podNode{t: t, host: n.host, pod: scratchNetNS(t, "del"), dir: n.dir}
	err := netns.Do(n.host, func() error {
		m := n.manager()
		deleted, err := other.add(m, "ctr-del")
		if err != nil {
			return err
		}
		if err := m.Delete("ctr-del"); err != nil { // retired, not deleted yet
			return err
		}
		ref := api.PodRef{ContainerID: "ctr-add", Namespace: "default", Pod: "ctr-add"}
		alloc, err := m.Allocate(ref)
		if err != nil {
			return err
		}
		hostIdx, err := n.createDown(alloc.HostIfName)
		if err != nil {
			return err
		}

		m2 := n.manager() // the agent restarted
		if _, _, err := m2.Restore(); err != nil {
			return err
		}
		if p := m2.Reaper().Pending(); !slices.Equal(p, []string{deleted.HostIfName}) {
			t.Errorf("pending after restart %v, want only the retired %s", p, deleted.HostIfName)
		}
		if err := n.reapOne(m2); err != nil {
			return err
		}
		if _, err := netlink.LinkByName(deleted.HostIfName); err == nil {
			t.Errorf("the retired %s is still there after the reaper", deleted.HostIfName)
		}
		return n.register(m2, ref, alloc, hostIdx)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createDown creates the pair as the plugin does, eth0 in the pod netns, and leaves
// the host side down (the plugin brings it up last); it returns its index.
func (n *podNode) createDown(hostIf string) (int, error) {
	pod, err := vnetns.GetFromPath(n.pod)
	if err != nil {
		return 0, err
	}
	defer pod.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(pod))}
	if err := netlink.LinkAdd(veth); err != nil {
		return 0, err
	}
	l, err := netlink.LinkByName(hostIf)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// reapOne runs m's reaper (in the host netns, as the agent does) until it has made
// one attempt, and returns that attempt's error.
func (n *podNode) reapOne(m *endpoint.Manager) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reported := make(chan error, 1)
	go func() {
		_ = netns.Do(n.host, func() error {
			m.Reaper().Run(ctx, func(a endpoint.Attempt) {
				select {
				case reported <- a.Err:
				default:
				}
			})
			return nil
		})
	}()
	return <-reported
}

// register finishes the ADD with m: the host veth at hostIdx up, the endpoint
// registered; it fails unless both ends are still there.
func (n *podNode) register(m *endpoint.Manager, ref api.PodRef, alloc api.Allocation, hostIdx int) error {
	l, err := netlink.LinkByIndex(hostIdx)
	if err != nil || l.Attrs().Name != alloc.HostIfName {
		return fmt.Errorf("the ADD's host veth %s (index %d) vanished: %v %v", alloc.HostIfName, hostIdx, attrs(l), err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return err
	}
	ep, err := m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: hostIdx,
		HostMAC: l.Attrs().HardwareAddr.String(), PodMAC: "02:00:00:00:00:02"})
	if err != nil {
		return err
	}
	if got, ok := m.Get(ref.ContainerID); !ok || got.HostIfIndex != ep.HostIfIndex || n.podEth0() == nil || m.Reaper().Len() != 0 {
		n.t.Errorf("after the ADD: endpoint %+v %v, pod eth0 %v, pending %v", got, ok, attrs(n.podEth0()), m.Reaper().Pending())
	}
	return nil
}
