package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/statefile"
)

// Pool is an Allocator whose state is written to a file after every change.
type Pool struct {
	mu    sync.Mutex
	alloc *Allocator
	path  string
	// damaged says what OpenPool could not read back and left out (nil: nothing).
	damaged error
}

type poolFile struct {
	CIDR        string            `json:"cidr"`
	Allocations map[string]string `json:"allocations"` // owner -> IP
	// Next is where the next allocation's scan starts (Allocator.Next); absent in
	// files of agents before it was kept, whose pools then scan from the start.
	Next string `json:"next,omitempty"`
}

// OpenPool opens the pool stored at path for cidr, creating it if absent. A stored pool
// for another CIDR is an error: the node's PodCIDR changed under running pods.
//
// A damaged file does not stop the agent: one that can't be parsed is moved aside to
// path+".corrupt" and the pool starts empty, and an entry with a bad address, outside
// the range, or on an address another entry holds too is left out (all claimants of a
// doubled address), as is a scan position outside the range (the scan starts over).
// Damaged says what was left out. The endpoints recorded on the node
// claim their addresses back when they are restored (endpoint.Manager.Restore), before
// any ADD is served, so what is lost is only the allocations of ADDs that had not
// registered: those fail and the runtime retries them.
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
		return nil, fmt.Errorf("read IPAM state: %w", err)
	}
	var f poolFile
	if err := json.Unmarshal(b, &f); err != nil {
		aside := path + ".corrupt"
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("IPAM state %s is corrupt (%w) and can't be moved aside: %w", path, err, rerr)
		}
		p.damaged = fmt.Errorf("IPAM state %s was corrupt (%w), moved to %s; started empty, the recorded endpoints claim their addresses back",
			path, err, aside)
		return p, p.save()
	}
	if f.CIDR != cidr.String() {
		return nil, fmt.Errorf("IPAM state %s is for %s but the node's PodCIDR is %v; the PodCIDR must not change while pods run: drain the node and remove the file",
			path, f.CIDR, cidr)
	}
	var damage []error
	if err := p.restore(f.Allocations); err != nil {
		damage = append(damage, fmt.Errorf("%w; left out, the recorded endpoints claim their addresses back", err))
	}
	if err := p.restoreNext(f.Next); err != nil {
		damage = append(damage, fmt.Errorf("%w; the next allocation scans from the range's start", err))
	}
	if len(damage) > 0 {
		p.damaged = fmt.Errorf("IPAM state %s: %w", path, errors.Join(damage...))
		return p, p.save()
	}
	return p, nil
}

// restoreNext makes the allocator's scan start where the stored pool's left off
// (stored: the file's "next"; empty in files written before it was kept).
func (p *Pool) restoreNext(stored string) error {
	if stored == "" {
		return nil
	}
	ip, err := netip.ParseAddr(stored)
	if err != nil {
		return fmt.Errorf("bad scan position %q", stored)
	}
	return p.alloc.SetNext(ip)
}

// restore adopts the stored allocations (owner to address) that are valid and
// unique; it returns what it left out. An owner that is not a CNI container id is left
// out too: the endpoint manager names files by owners (a GC or DEL removes
// "<owner>.json"), and a written "../x" would reach outside the state directory.
func (p *Pool) restore(stored map[string]string) error {
	claims := map[netip.Addr][]string{}
	var errs []error
	for owner, s := range stored {
		if err := api.CheckContainerID(owner); err != nil {
			errs = append(errs, fmt.Errorf("allocation of %s: %w", s, err))
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("bad address %q of %s", s, owner))
			continue
		}
		claims[ip] = append(claims[ip], owner)
	}
	for ip, owners := range claims {
		if len(owners) > 1 {
			errs = append(errs, fmt.Errorf("address %v is recorded for %d owners (%v)", ip, len(owners), owners))
			continue
		}
		if err := p.alloc.Restore(ip, owners[0]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Damaged says what OpenPool could not read back from a damaged file and left out;
// nil when the file was whole.
func (p *Pool) Damaged() error { return p.damaged }

func (p *Pool) save() error {
	f := poolFile{CIDR: p.alloc.CIDR().String(), Allocations: map[string]string{}, Next: p.alloc.Next().String()}
	for owner, ip := range p.alloc.Owners() {
		f.Allocations[owner] = ip.String()
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return statefile.Write(p.path, b, 0o600)
}

// Allocate returns owner's address (existing or new) and persists a new one; a new
// one is none that claimed says is claimed (Allocator.Allocate; nil: none is). An
// existing address (a retried ADD) needs no write, and a failed write never takes it
// away: its endpoint may hold it, and the next allocation would hand it out again.
// claimed is called with the pool locked: it must be cheap and must not call the pool.
func (p *Pool) Allocate(owner string, claimed Claimed) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip, ok := p.alloc.byUser[owner]; ok {
		return ip, nil
	}
	ip, err := p.alloc.Allocate(owner, claimed)
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
