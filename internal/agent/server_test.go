package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/ipam"
)

// fakeNode stands in for BPF and netlink under a real endpoint.Manager.
type fakeNode struct {
	entries map[netip.Addr]datapath.EndpointInfo
	links   map[string]int
}

func (f *fakeNode) UpsertEndpoint(ip netip.Addr, ep datapath.EndpointInfo) error {
	f.entries[ip] = ep
	return nil
}
func (f *fakeNode) DeleteEndpoint(ip netip.Addr) error { delete(f.entries, ip); return nil }
func (f *fakeNode) DeleteEndpointOf(ip netip.Addr, ifindex int) error {
	if e, ok := f.entries[ip]; ok && e.IfIndex != ifindex {
		return datapath.ErrEndpointNotOwned
	}
	delete(f.entries, ip)
	return nil
}
func (f *fakeNode) Endpoints() (map[netip.Addr]datapath.EndpointInfo, error) { return f.entries, nil }
func (f *fakeNode) AttachEndpoint(int, string) error                         { return nil }
func (f *fakeNode) DetachEndpoint(int, string) error                         { return nil }
func (f *fakeNode) IfIndex(name string) (int, error) {
	if i, ok := f.links[name]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("%s: %w", name, endpoint.ErrLinkNotFound)
}
func (f *fakeNode) SetLinkDown(int) error { return nil }
func (f *fakeNode) DeleteLinkAt(index int, name string) error {
	if f.links[name] == index {
		delete(f.links, name)
	}
	return nil
}
func (f *fakeNode) DownPodVeths() (map[string]int, error) { return nil, nil }
func (f *fakeNode) ReplacePodRoute(netip.Addr, int) error { return nil }
func (f *fakeNode) DeletePodRoute(netip.Addr) error       { return nil }

// testEndpoints is node n1's endpoint.Manager, with its state and IPAM pool (of
// 10.244.0.0/24) in dir, over a fakeNode.
func testEndpoints(t *testing.T, dir string) (*endpoint.Manager, *ipam.Pool, *fakeNode) {
	t.Helper()
	return testEndpointsOf(t, dir, "10.244.0.0/24")
}

// testEndpointsOf is testEndpoints with a pool of podCIDR.
func testEndpointsOf(t *testing.T, dir, podCIDR string) (*endpoint.Manager, *ipam.Pool, *fakeNode) {
	t.Helper()
	pool, err := ipam.OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix(podCIDR))
	if err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}
	return endpoint.NewManager(endpoint.Config{Dir: filepath.Join(dir, "endpoints"), Node: "n1"}, node, node, pool), pool, node
}

// serveTest serves the API of node n1 on a socket in a temporary directory, with a
// real endpoint.Manager and IPAM pool over a fakeNode, and no views registered.
func serveTest(t *testing.T) (*server, *fakeNode) {
	t.Helper()
	dir := t.TempDir()
	eps, pool, node := testEndpoints(t, dir)
	a := &server{cfg: Config{Node: "n1", StateDir: dir}, eps: eps, pool: pool, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv, err := a.serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return a, node
}

// The API's socket is root's alone (0600) whatever the umask: a local user of the
// node must not allocate, register or delete pods' endpoints.
func TestAPISocketIsRootsAlone(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	a, _ := serveTest(t)
	fi, err := os.Stat(a.cfg.socket())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("API socket %s has mode %v with umask 0, want 0600", a.cfg.socket(), perm)
	}
}

// registerTestEndpoint allocates an address for container id and registers its
// endpoint on a host veth of index 7 (links: the fake node's veths).
func registerTestEndpoint(t *testing.T, eps *endpoint.Manager, links map[string]int, id string) api.Allocation {
	t.Helper()
	alloc, err := eps.Allocate(api.PodRef{ContainerID: id})
	if err != nil {
		t.Fatal(err)
	}
	links[alloc.HostIfName] = 7
	if _, err := eps.Put(api.Endpoint{PodRef: api.PodRef{ContainerID: id, IfName: "eth0"}, IP: alloc.IP, HostIfName: alloc.HostIfName,
		HostIfIndex: 7, HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"}); err != nil {
		t.Fatal(err)
	}
	return alloc
}

// The agent's DELETE refuses a caller that names another host veth than the record's
// (412, api.ErrNotOwner through the client), and deletes for the owner.
func TestDeleteEndpointOnlyByOwner(t *testing.T) {
	a, node := serveTest(t)
	eps, pool := a.eps, a.pool
	alloc := registerTestEndpoint(t, eps, node.links, "a")

	c := api.NewClient(a.cfg.socket())
	ctx := context.Background()
	if err := c.DeleteEndpointOf(ctx, "a", 9, ""); !errors.Is(err, api.ErrNotOwner) {
		t.Errorf("DELETE naming veth 9 = %v, want ErrNotOwner", err)
	}
	if _, ok := eps.Get("a"); !ok || len(node.entries) != 1 || node.links[alloc.HostIfName] != 7 {
		t.Errorf("a foreign DELETE removed something: record %v entries %v links %v", ok, node.entries, node.links)
	}
	// The veth is named by the container id alone: a DEL of another interface
	// of the container (net1, an ADD that was refused) finds a's veth at 7.
	if err := c.DeleteEndpointOf(ctx, "a", 7, "net1"); !errors.Is(err, api.ErrNotOwner) || !strings.Contains(err.Error(), "interface eth0") {
		t.Errorf("DELETE of interface net1 = %v, want ErrNotOwner naming eth0", err)
	}
	if err := c.DeleteEndpointOf(ctx, "a", 7, "../x"); err == nil || errors.Is(err, api.ErrNotOwner) || !strings.Contains(err.Error(), "CNI_IFNAME") {
		t.Errorf("DELETE of interface %q = %v, want a bad request naming CNI_IFNAME", "../x", err)
	}
	if _, ok := eps.Get("a"); !ok || len(node.entries) != 1 {
		t.Errorf("a DELETE of another interface removed something: record %v entries %v", ok, node.entries)
	}
	if err := c.DeleteEndpointOf(ctx, "a", 7, "eth0"); err != nil {
		t.Errorf("the owner's DELETE = %v", err)
	}
	if _, ok := eps.Get("a"); ok || len(node.entries) != 0 {
		t.Errorf("after the owner's DELETE: record %v entries %v", ok, node.entries)
	}
	if _, ok := pool.Lookup("a"); ok {
		t.Error("after the owner's DELETE the IP is still allocated")
	}
	// Not ready yet (waiting for Services): deletes are served all the same.
	if err := c.DeleteEndpointOf(ctx, "gone", 0, ""); err != nil {
		t.Errorf("DELETE before ready = %v, want success", err)
	}
}

// A request body past maxRequestBody is refused (400) rather than read on, and the
// IP of a container whose endpoint is registered is not released by a failed ADD's
// cleanup (409 naming CNI DEL), through the real API socket.
func TestAPIRefusesOversizedBodyAndLiveRelease(t *testing.T) {
	a, node := serveTest(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.cfg.socket())
	}}}
	a.ready.Store(true)
	body := `{"containerID":"` + strings.Repeat("x", maxRequestBody) + `"}`
	resp, err := hc.Post("http://agent/v1/ipam/big", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "at most") {
		t.Errorf("oversized allocate body: %d %s; want 400 naming the limit", resp.StatusCode, msg)
	}

	alloc := registerTestEndpoint(t, a.eps, node.links, "live")
	err = api.NewClient(a.cfg.socket()).Release(context.Background(), "live", "")
	if err == nil || !strings.Contains(err.Error(), "CNI DEL") {
		t.Errorf("release of a live endpoint's IP = %v, want refused naming CNI DEL", err)
	}
	if ip, ok := a.pool.Lookup("live"); !ok || ip.String() != alloc.IP {
		t.Errorf("the live endpoint's IP after the refused release: %v %v, want %s", ip, ok, alloc.IP)
	}
}

// Two ADDs of one container in flight through the API get one IP, each its own
// attempt; the release of one (named by its attempt) leaves the IP to the other, the
// release of the last frees it.
func TestAPIReleaseKeepsTheIPOfAnotherADDInFlight(t *testing.T) {
	a, _ := serveTest(t)
	a.ready.Store(true)
	c, ctx := api.NewClient(a.cfg.socket()), context.Background()
	first, err1 := c.Allocate(ctx, api.PodRef{ContainerID: "twice"})
	second, err2 := c.Allocate(ctx, api.PodRef{ContainerID: "twice"})
	if err1 != nil || err2 != nil || first.IP != second.IP || first.Attempt == "" || first.Attempt == second.Attempt {
		t.Fatalf("allocations %+v %v and %+v %v; want one IP, two attempts", first, err1, second, err2)
	}
	if err := c.Release(ctx, "twice", second.Attempt); err != nil {
		t.Fatal(err)
	}
	if ip, ok := a.pool.Lookup("twice"); !ok || ip.String() != first.IP {
		t.Fatalf("after the second ADD's release: %v %v, want the first's %s kept", ip, ok, first.IP)
	}
	if err := c.Release(ctx, "twice", first.Attempt); err != nil {
		t.Fatal(err)
	}
	if ip, ok := a.pool.Lookup("twice"); ok {
		t.Errorf("after both releases %v is still allocated", ip)
	}
}

// An allocation refused while the only free address is one a Pod being deleted still
// lists says "retry" (api.ErrRetry: the CNI plugin's "try again later", not "agent
// unavailable"); a range whose addresses are all in use does not.
func TestAPIAllocateSaysWhenToRetry(t *testing.T) {
	dir := t.TempDir()
	eps, pool, _ := testEndpointsOf(t, dir, "10.244.0.0/30") // 10.244.0.2 only
	eps.UseAddressClaims(func(_ netip.Addr, podUID string) bool { return podUID != "u-old" })
	a := &server{cfg: Config{Node: "n1", StateDir: dir}, eps: eps, pool: pool, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv, err := a.serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	a.ready.Store(true)
	c, ctx := api.NewClient(a.cfg.socket()), context.Background()

	_, err = c.Allocate(ctx, api.PodRef{ContainerID: "new", Namespace: "shop", Pod: "new", PodUID: "u-new"})
	if !errors.Is(err, api.ErrRetry) || errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "shop/new") {
		t.Fatalf("allocation while the free address is claimed = %v, want api.ErrRetry naming the pod", err)
	}
	if _, err := c.Allocate(ctx, api.PodRef{ContainerID: "old", Namespace: "shop", Pod: "old", PodUID: "u-old"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Allocate(ctx, api.PodRef{ContainerID: "new", Namespace: "shop", Pod: "new", PodUID: "u-new"})
	if err == nil || errors.Is(err, api.ErrRetry) || !strings.Contains(err.Error(), "larger PodCIDR") {
		t.Errorf("allocation with every address in use = %v, want an error without retry saying what to do", err)
	}
}

// A path id that is not a CNI container id (here one that unescapes to "../x") is a
// bad request (400) on every endpoint call, answered before anything names a file by
// it; before, allocate and put answered 409 and release and delete 500.
func TestAPIRefusesForgedContainerIDs(t *testing.T) {
	a, _ := serveTest(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.cfg.socket())
	}}}
	a.ready.Store(true)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/ipam/..%2Fx", "{}"},
		{http.MethodDelete, "/v1/ipam/..%2Fx", ""},
		{http.MethodPut, "/v1/endpoints/..%2Fx", "{}"},
		{http.MethodDelete, "/v1/endpoints/..%2Fx", ""},
	} {
		req, err := http.NewRequest(c.method, "http://agent"+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "not a CNI container id") {
			t.Errorf("%s %s: %d %s; want 400 saying it is not a CNI container id", c.method, c.path, resp.StatusCode, msg)
		}
	}
}

// A runtime's GC lists every attachment it keeps: a node with thousands of pods
// sends more than maxRequestBody, and its GC is served all the same (it was refused
// as an oversized body, so no GC ever ran there); it keeps what it lists.
func TestGCOfManyAttachments(t *testing.T) {
	a, node := serveTest(t)
	a.ready.Store(true)
	registerTestEndpoint(t, a.eps, node.links, "kept")
	keep := []string{"kept"}
	for i := range 2000 {
		keep = append(keep, fmt.Sprintf("%064x", i))
	}
	if b, _ := json.Marshal(api.GCRequest{Keep: keep}); len(b) <= maxRequestBody {
		t.Fatalf("the GC body is %d bytes, want more than %d", len(b), maxRequestBody)
	}
	res, err := api.NewClient(a.cfg.socket()).GC(context.Background(), keep)
	if err != nil || len(res.Removed) != 0 {
		t.Fatalf("GC keeping 2001 attachments = %v, %v; want served, nothing removed", res.Removed, err)
	}
	if _, ok := a.eps.Get("kept"); !ok {
		t.Error("GC removed an endpoint it was told to keep")
	}
}
