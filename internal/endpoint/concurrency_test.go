package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// lockedDatapath and lockedLinks make the fakes safe for the concurrent CNI calls
// below (the real ones are: BPF map syscalls, netlink sockets).
type lockedDatapath struct {
	mu sync.Mutex
	f  *fakeDatapath
}

func (l *lockedDatapath) UpsertEndpoint(ip netip.Addr, ep datapath.EndpointInfo) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.UpsertEndpoint(ip, ep)
}
func (l *lockedDatapath) DeleteEndpoint(ip netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DeleteEndpoint(ip)
}
func (l *lockedDatapath) DeleteEndpointOf(ip netip.Addr, ifindex int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DeleteEndpointOf(ip, ifindex)
}
func (l *lockedDatapath) Endpoints() (map[netip.Addr]datapath.EndpointInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Endpoints()
}
func (l *lockedDatapath) AttachEndpoint(ifindex int, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.AttachEndpoint(ifindex, name)
}
func (l *lockedDatapath) DetachEndpoint(ifindex int, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DetachEndpoint(ifindex, name)
}

type lockedLinks struct {
	mu   sync.Mutex
	f    *fakeLinks
	next int
}

func (l *lockedLinks) IfIndex(name string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.IfIndex(name)
}
func (l *lockedLinks) SetLinkDown(index int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.SetLinkDown(index)
}
func (l *lockedLinks) DeleteLinkAt(index int, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DeleteLinkAt(index, name)
}
func (l *lockedLinks) DownPodVeths() (map[string]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DownPodVeths()
}
func (l *lockedLinks) ReplacePodRoute(ip netip.Addr, ifindex int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.ReplacePodRoute(ip, ifindex)
}
func (l *lockedLinks) DeletePodRoute(ip netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.DeletePodRoute(ip)
}

// createVeth is the plugin's veth pair: it fails for a name that exists (a second
// ADD without DEL), as netlink's LinkAdd does.
func (l *lockedLinks) createVeth(name string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.f.links[name]; ok {
		return 0, fmt.Errorf("create veth %s: file exists", name)
	}
	l.next++
	l.f.links[name] = l.next
	return l.next, nil
}

func (l *lockedLinks) deleteVeth(name string, index int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f.links[name] == index {
		delete(l.f.links, name)
	}
}

// node is a manager over the locked fakes, driven the way myelin-cni drives it.
type node struct {
	m     *Manager
	dp    *lockedDatapath
	links *lockedLinks
}

func newNode(t *testing.T) *node {
	t.Helper()
	dp := &lockedDatapath{f: &fakeDatapath{map[netip.Addr]datapath.EndpointInfo{}, map[string]int{}}}
	links := &lockedLinks{f: newFakeLinks(), next: 100}
	f := newFixture(t, t.TempDir(), &fakeDatapath{}, newFakeLinks())
	f.m = NewManager(f.m.cfg, dp, links, f.pool)
	return &node{m: f.m, dp: dp, links: links}
}

// add is cmdAdd: allocate, build the veth, register; on failure remove the veth it
// built and release the IP.
func (n *node) add(id string) (api.Endpoint, error) { return n.addWith(id, addHooks{}) }

// addHooks stop an ADD at its steps, so a test can interleave it with others.
type addHooks struct {
	afterAllocate func() // between allocate and building the veth
	beforePut     func() // between building the veth and registering
}

func (n *node) addWith(id string, h addHooks) (api.Endpoint, error) {
	ref := api.PodRef{ContainerID: id, Namespace: "default", Pod: id}
	alloc, err := n.m.Allocate(ref)
	if err != nil {
		return api.Endpoint{}, err
	}
	if h.afterAllocate != nil {
		h.afterAllocate()
	}
	idx, err := n.links.createVeth(alloc.HostIfName)
	if err == nil {
		if h.beforePut != nil {
			h.beforePut()
		}
		var ep api.Endpoint
		ep, err = n.m.Put(api.Endpoint{PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: idx,
			HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"})
		if err == nil {
			return ep, nil
		}
		n.links.deleteVeth(alloc.HostIfName, idx)
	}
	if rerr := n.m.Release(id, alloc.Attempt); rerr != nil && !errors.Is(rerr, ErrEndpointExists) {
		err = errors.Join(err, rerr)
	}
	return api.Endpoint{}, err
}

// del is cmdDel with the agent up: delete naming the veth it sees.
func (n *node) del(id string) error {
	idx, _ := n.links.IfIndex(HostIfName(id))
	err := n.m.DeleteOwned(id, idx)
	if errors.Is(err, api.ErrNotOwner) {
		return nil
	}
	return err
}

// consistent checks that the endpoints, the allocations and the datapath agree: each
// endpoint holds its own IP, no two share one, every allocation without an endpoint
// is pending, and the map has exactly the endpoints' addresses.
func (n *node) consistent(t *testing.T) {
	t.Helper()
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	owners := n.m.pool.Owners()
	byIP := map[string]string{}
	for id, ep := range n.m.eps {
		if prev, dup := byIP[ep.IP]; dup {
			t.Errorf("%s and %s both have %s", prev, id, ep.IP)
		}
		byIP[ep.IP] = id
		if owners[id].String() != ep.IP {
			t.Errorf("endpoint %s has %s, the pool says %v", id, ep.IP, owners[id])
		}
	}
	for id := range owners {
		if _, ok := n.m.eps[id]; !ok {
			if _, ok := n.m.pending[id]; !ok {
				t.Errorf("allocation of %s has neither an endpoint nor a pending ADD", id)
			}
		}
	}
	for id := range n.m.pending {
		if _, ok := owners[id]; !ok {
			t.Errorf("pending ADD %s holds no allocation", id)
		}
	}
	n.dp.mu.Lock()
	defer n.dp.mu.Unlock()
	if len(n.dp.f.eps) != len(n.m.eps) {
		t.Errorf("map has %d entries for %d endpoints", len(n.dp.f.eps), len(n.m.eps))
	}
	for ip, info := range n.dp.f.eps {
		ep, ok := n.m.eps[byIP[ip.String()]]
		if !ok || ep.HostIfIndex != info.IfIndex {
			t.Errorf("map entry %v -> %d has no endpoint on that veth", ip, info.IfIndex)
		}
	}
}

// TestManagerConcurrentCNICalls: ADDs and DELs of many containers at once, retried
// ADDs, and ADD racing DEL of the same container, with a GC running: every ADD that
// succeeds holds a unique IP, a retried ADD gets the same IP and allocates nothing,
// and once every container is deleted nothing is left.
func TestManagerConcurrentCNICalls(t *testing.T) {
	n := newNode(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	var mu sync.Mutex
	live := map[string]string{} // IP -> container, of the ADDs that succeeded and are not deleted
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("ctr-%d", w)
			for range 3 {
				ep, err := n.add(id)
				if err != nil {
					errs <- fmt.Errorf("ADD %s: %w", id, err)
					return
				}
				mu.Lock()
				if other, dup := live[ep.IP]; dup {
					errs <- fmt.Errorf("%s got %s, which %s holds", id, ep.IP, other)
				}
				live[ep.IP] = id
				mu.Unlock()
				// The runtime retries the ADD: the same IP, its veth exists, so it fails
				// and its cleanup must not free the live endpoint's IP.
				if alloc, err := n.m.Allocate(api.PodRef{ContainerID: id}); err != nil || alloc.IP != ep.IP {
					errs <- fmt.Errorf("retried allocate of %s = %v %v, want %s", id, alloc.IP, err, ep.IP)
				}
				if _, err := n.add(id); err == nil {
					errs <- fmt.Errorf("second ADD of %s without DEL succeeded", id)
				}
				if got, ok := n.m.Get(id); !ok || got.IP != ep.IP {
					errs <- fmt.Errorf("%s after its failed second ADD: %+v %v", id, got, ok)
				}
				mu.Lock()
				delete(live, ep.IP)
				mu.Unlock()
				if err := n.del(id); err != nil {
					errs <- fmt.Errorf("DEL %s: %w", id, err)
				}
			}
		}()
	}
	for w := range 8 { // ADD and DEL of one container racing; the runtime DELs again at the end
		id := fmt.Sprintf("race-%d", w)
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = n.add(id) }()
		go func() {
			defer wg.Done()
			if err := n.del(id); err != nil {
				errs <- fmt.Errorf("racing DEL %s: %w", id, err)
			}
		}()
	}
	var keep []string // the runtime's GC: every container above is valid
	for w := range 24 {
		keep = append(keep, fmt.Sprintf("ctr-%d", w))
	}
	for w := range 8 {
		keep = append(keep, fmt.Sprintf("race-%d", w))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			if removed, err := n.m.GC(keep); err != nil || len(removed) != 0 {
				errs <- fmt.Errorf("GC = %v, %w; want nothing removed", removed, err)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n.consistent(t)
	for w := range 8 {
		if err := n.del(fmt.Sprintf("race-%d", w)); err != nil {
			t.Error(err)
		}
	}
	n.consistent(t)
	if _, used, _ := n.m.pool.Usage(); used != 0 || len(n.m.eps) != 0 || len(n.m.pending) != 0 {
		t.Errorf("after every DEL: %d IPs allocated, %d endpoints, %d pending", used, len(n.m.eps), len(n.m.pending))
	}
}

// TestManagerGCRacingADD: a GC whose list of valid attachments can't hold the ADDs
// in flight never takes an ADD's allocation between allocate and register.
func TestManagerGCRacingADD(t *testing.T) {
	n := newNode(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				id := fmt.Sprintf("ctr-%d-%d", w, i)
				if _, err := n.add(id); err != nil {
					errs <- fmt.Errorf("ADD %s with GC running: %w", id, err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			if _, err := n.m.GC(nil); err != nil {
				errs <- fmt.Errorf("GC: %w", err)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n.consistent(t)
}
