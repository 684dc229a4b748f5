package cniplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/netns"
)

// ipamAgentWith serves the agent's IPAM calls from pool on a unix socket, as the
// agent's endpoint manager does, and answers the endpoint PUT with put.
func ipamAgentWith(t *testing.T, pool *ipam.Pool, put http.HandlerFunc) string {
	t.Helper()
	return ipamAgentHooked(t, pool, func() {}, put)
}

// ipamAgentHooked is ipamAgentWith that runs allocated after each allocation, before
// it answers. The manager's Allocate and Release touch neither datapath nor links.
func ipamAgentHooked(t *testing.T, pool *ipam.Pool, allocated func(), put http.HandlerFunc) string {
	t.Helper()
	m := endpoint.NewManager(endpoint.Config{Dir: t.TempDir(), Node: "n1", MTU: 1500}, nil, nil, pool)
	return managerAgent(t, m, allocated, put)
}

// An ADD whose pod netns vanishes after the agent allocated its IP and before the
// plugin builds the veth (the sandbox was torn down mid-way; here the agent removes
// the netns as it answers the allocation) fails and gives its IP back, with no host
// veth left: nothing leaks. (A netns already gone when ADD starts is refused before
// the agent is asked: TestAddCheckRefuseBadNetNS.)
func TestPrivilegedAddForAVanishedNetnsReleasesTheIP(t *testing.T) {
	requireRoot(t)
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	allocated := make(chan struct{})
	sock := ipamAgentHooked(t, pool, func() {
		close(allocated)
		if out, err := exec.Command("ip", "netns", "del", filepath.Base(pod)).CombinedOutput(); err != nil {
			t.Errorf("remove the pod netns after the allocation: %v %s", err, out)
		}
	}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "unexpected register: the pod netns is gone"})
	})
	const id = "ctr-vanished"
	err = netns.Do(host, func() error {
		if err := cmdAdd(cniArgs(sock, id, pod)); err == nil {
			return fmt.Errorf("ADD into a netns removed after its allocation succeeded")
		}
		if l, err := netlink.LinkByName(api.HostIfName(id)); err == nil {
			return fmt.Errorf("host veth %s (index %d) left by the failed ADD", l.Attrs().Name, l.Attrs().Index)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-allocated:
	default:
		t.Fatal("the ADD failed before the agent allocated: the netns did not vanish after the allocation")
	}
	if ip, ok := pool.Lookup(id); ok {
		t.Errorf("the failed ADD still holds %v", ip)
	}
}

// An ADD whose registration outlasts its deadline (an agent stuck in the endpoint
// PUT; here the test ends the ADD's context there) still gives its IP back: the
// release has a deadline of its own (before, it reused the expired one, failed at
// once, and the IP stayed held until a DEL).
func TestPrivilegedAddPastItsDeadlineReleasesTheIP(t *testing.T) {
	requireRoot(t)
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, expire := context.WithCancel(context.Background())
	defer expire()
	defer func(f func() (context.Context, context.CancelFunc)) { addContext = f }(addContext)
	addContext = func() (context.Context, context.CancelFunc) { return ctx, expire }
	sock := ipamAgentWith(t, pool, func(w http.ResponseWriter, r *http.Request) {
		expire() // the ADD's deadline passes while the agent is stuck here
		<-r.Context().Done()
	})
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	err = netns.Do(host, func() error {
		if err := cmdAdd(cniArgs(sock, "ctr-slow", pod)); err == nil {
			return fmt.Errorf("ADD against an agent stuck in the endpoint PUT succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ip, ok := pool.Lookup("ctr-slow"); ok {
		t.Errorf("the ADD whose deadline passed in the endpoint PUT still holds %v", ip)
	}
}
