package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"github.com/myelin-net/myelin/internal/statefile"
)

// Pool is an Allocator whose state is written to a file after every change.
type Pool struct {
	mu    sync.Mutex
	alloc *Allocator
	path  string
}

type poolFile struct {
	CIDR        string            `json:"cidr"`
	Allocations map[string]string `json:"allocations"` // owner -> IP
}

// OpenPool opens the pool stored at path for cidr, creating it if absent. A stored pool
// for another CIDR is an error: the node's PodCIDR changed under running pods.
func OpenPool(path string, cidr netip.Prefix) (*Pool, error) {
	alloc, err := NewAllocator(cidr)
	if err != nil {
		return nil, err
	}
	p := &Pool{alloc: alloc, path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, p.save()
	}
	if err != nil {
		return nil, err
	}
	var f poolFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read IPAM state %s: %w; move it away and restart the agent: "+
			"the endpoints recorded on the node claim their addresses back", path, err)
	}
	if f.CIDR != cidr.String() {
		return nil, fmt.Errorf("IPAM state %s is for %s but the node's PodCIDR is %v; the PodCIDR must not change while pods run: drain the node and remove the file",
			path, f.CIDR, cidr)
	}
	for owner, s := range f.Allocations {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("IPAM state %s: bad address %q for %s", path, s, owner)
		}
		if err := alloc.Restore(ip, owner); err != nil {
			return nil, fmt.Errorf("IPAM state %s: %w", path, err)
		}
	}
	return p, nil
}

func (p *Pool) save() error {
	f := poolFile{CIDR: p.alloc.CIDR().String(), Allocations: map[string]string{}}
	for owner, ip := range p.alloc.Owners() {
		f.Allocations[owner] = ip.String()
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return statefile.Write(p.path, b, 0o600)
}

// Allocate returns owner's address (existing or new) and persists a new one. An
// existing address (a retried ADD) needs no write, and a failed write never takes it
// away: its endpoint may hold it, and the next allocation would hand it out again.
func (p *Pool) Allocate(owner string) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip, ok := p.alloc.byUser[owner]; ok {
		return ip, nil
	}
	ip, err := p.alloc.Allocate(owner)
	if err != nil {
		return ip, err
	}
	if err := p.save(); err != nil {
		p.alloc.Release(owner)
		return netip.Addr{}, fmt.Errorf("persist IP allocation: %w", err)
	}
	return ip, nil
}

// Claim makes ip owner's, as an endpoint record read back at start-up says it is,
// and persists a change. It fails, changing nothing, for an address outside the
// range, one another owner holds, or an owner that holds another address: two
// claims on one address must not both win.
func (p *Pool) Claim(owner string, ip netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.alloc.byUser[owner]; ok && held == ip {
		return nil
	}
	if err := p.alloc.Restore(ip, owner); err != nil {
		return err
	}
	if err := p.save(); err != nil {
		p.alloc.Release(owner)
		return fmt.Errorf("persist IP allocation: %w", err)
	}
	return nil
}

// Release frees owner's address, if any, and persists the change.
func (p *Pool) Release(owner string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.alloc.Release(owner); !ok {
		return nil
	}
	return p.save()
}

// Lookup returns owner's address.
func (p *Pool) Lookup(owner string) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip, ok := p.alloc.byUser[owner]
	return ip, ok
}

// Owners returns a copy of all allocations.
func (p *Pool) Owners() map[string]netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alloc.Owners()
}

// Usage reports the range, addresses in use and addresses available in total.
func (p *Pool) Usage() (cidr netip.Prefix, used, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alloc.CIDR(), p.alloc.Used(), p.alloc.Total()
}
