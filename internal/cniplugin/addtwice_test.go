package cniplugin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// managerAgent serves the agent's IPAM calls (allocate, a failed ADD's release) from
// m as the agent's API does, running allocated after each allocation before it
// answers, and answers the endpoint PUT with put.
func managerAgent(t *testing.T, m *endpoint.Manager, allocated func(), put http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/ipam/{id}", func(w http.ResponseWriter, r *http.Request) {
		var ref api.PodRef
		_ = json.NewDecoder(r.Body).Decode(&ref)
		ref.ContainerID = r.PathValue("id")
		alloc, err := m.Allocate(ref)
		if err != nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err.Error()})
			return
		}
		allocated()
		_ = json.NewEncoder(w).Encode(alloc)
	})
	mux.HandleFunc("DELETE /v1/ipam/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Release(r.PathValue("id"), r.URL.Query().Get("attempt")); err != nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /v1/endpoints/{id}", put)
	return testenv.ServeUnixHTTP(t, mux.ServeHTTP)
}

// TestPrivilegedSecondADDWhileTheFirstIsInFlight: the runtime retries an ADD while
// the first is still registering its endpoint. The retry gets the same IP, finds the
// veth taken and fails; its cleanup must leave the first ADD's IP, so the first
// registers and the pod keeps its network. Before, the retry released the container
// id's IP, the first ADD's register was refused, and the pod got no network at all.
func TestPrivilegedSecondADDWhileTheFirstIsInFlight(t *testing.T) {
	requireRoot(t)
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	// The endpoint PUT below checks the allocation as the agent's does, without
	// registering: Allocate and Release touch neither the datapath nor the links.
	m := endpoint.NewManager(endpoint.Config{Dir: t.TempDir(), Node: "n1", MTU: 1500}, nil, nil, pool)
	inPut, goOn := make(chan struct{}), make(chan struct{})
	sock := managerAgent(t, m, func() {}, func(w http.ResponseWriter, r *http.Request) {
		var ep api.Endpoint
		_ = json.NewDecoder(r.Body).Decode(&ep)
		close(inPut) // only the first ADD gets here: the second finds the veth taken
		<-goOn
		if ip, ok := pool.Lookup(r.PathValue("id")); !ok || ip.String() != ep.IP {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: fmt.Sprintf("IP %s is not allocated to %s (it holds %v)", ep.IP, r.PathValue("id"), ip)})
			return
		}
		_ = json.NewEncoder(w).Encode(ep)
	})
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	discardStdout(t) // the first ADD prints its result there
	const id = "ctr-twice"
	first := make(chan error, 1)
	go func() { first <- netns.Do(host, func() error { return cmdAdd(cniArgs(sock, id, pod)) }) }()
	<-inPut
	err = netns.Do(host, func() error {
		if err := cmdAdd(cniArgs(sock, id, pod)); err == nil {
			return fmt.Errorf("the second ADD of %s succeeded while the first holds its veth", id)
		}
		return nil
	})
	close(goOn)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first ADD, after the second one's cleanup: %v", err)
	}
	ip, ok := pool.Lookup(id)
	if !ok {
		t.Fatalf("%s holds no IP after both ADDs", id)
	}
	err = netns.Do(pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return fmt.Errorf("the pod's eth0 after both ADDs: %w", err)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || addrs[0].IP.String() != ip.String() {
			return fmt.Errorf("the pod's eth0 has %v %v, want %v", addrs, err, ip)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// discardStdout sends what the plugin prints to stdout (a successful ADD's result)
// nowhere until the test ends, so it does not run into the test's own output.
func discardStdout(t *testing.T) {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = null
	t.Cleanup(func() {
		os.Stdout = stdout
		_ = null.Close()
	})
}

// TestPrivilegedStaleADDLeavesTheNewVeth: an ADD waits in its endpoint PUT while the
// runtime deletes the container's attachment and attaches it again (here: the veth
// deleted and one of the same name made). The old ADD's PUT then fails; its cleanup
// removes its own veth only, by index, so the new attachment keeps its veth. Before,
// it deleted whatever link had the name: the new attachment's.
func TestPrivilegedStaleADDLeavesTheNewVeth(t *testing.T) {
	requireRoot(t)
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	m := endpoint.NewManager(endpoint.Config{Dir: t.TempDir(), Node: "n1", MTU: 1500}, nil, nil, pool)
	inPut, goOn := make(chan api.Endpoint, 1), make(chan struct{})
	sock := managerAgent(t, m, func() {}, func(w http.ResponseWriter, r *http.Request) {
		var ep api.Endpoint
		_ = json.NewDecoder(r.Body).Decode(&ep)
		inPut <- ep
		<-goOn
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: fmt.Sprintf("host veth %s has another index than %d", ep.HostIfName, ep.HostIfIndex)})
	})
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	const id = "ctr-stale"
	stale := make(chan error, 1)
	go func() { stale <- netns.Do(host, func() error { return cmdAdd(cniArgs(sock, id, pod)) }) }()
	ep := <-inPut
	newIndex := 0
	err = netns.Do(host, func() error {
		old, err := netlink.LinkByIndex(ep.HostIfIndex)
		if err != nil {
			return fmt.Errorf("the stale ADD's veth: %w", err)
		}
		if err := netlink.LinkDel(old); err != nil {
			return err
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ep.HostIfName}, PeerName: "cnitestpeer"}); err != nil {
			return fmt.Errorf("the new attachment's veth: %w", err)
		}
		l, err := netlink.LinkByName(ep.HostIfName)
		if err != nil {
			return err
		}
		newIndex = l.Attrs().Index
		return nil
	})
	close(goOn)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-stale; err == nil {
		t.Fatal("the stale ADD succeeded, want its PUT's refusal")
	}
	err = netns.Do(host, func() error {
		l, err := netlink.LinkByName(ep.HostIfName)
		if err != nil {
			return fmt.Errorf("the new attachment's veth %s after the stale ADD's cleanup: %w", ep.HostIfName, err)
		}
		if l.Attrs().Index != newIndex {
			return fmt.Errorf("veth %s is at index %d, want the new attachment's %d", ep.HostIfName, l.Attrs().Index, newIndex)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
