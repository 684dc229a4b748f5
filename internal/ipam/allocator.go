package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrExhausted is returned when every address of the range is in use.
var ErrExhausted = errors.New("pod IP range exhausted")

// ErrClaimed is returned when the range's free addresses are all claimed (Claimed)
// by Pods being deleted; it wraps ErrExhausted. It passes once those Pods are gone.
var ErrClaimed = fmt.Errorf("%w for now", ErrExhausted)

// Allocator hands out the addresses of one IPv4 range to owners (CNI container ids).
// Allocation for an owner that already has an address returns that address, so a
// retried CNI ADD does not leak. Not safe for concurrent use; Pool locks it.
type Allocator struct {
	cidr   netip.Prefix
	owners map[netip.Addr]string
	byUser map[string]netip.Addr
	next   netip.Addr
}

// NewAllocator returns an allocator for cidr. The network address, the first host
// address (kept for the node) and the broadcast address are never handed out.
func NewAllocator(cidr netip.Prefix) (*Allocator, error) {
	if !cidr.Addr().Is4() || cidr.Bits() > 30 || cidr != cidr.Masked() {
		return nil, fmt.Errorf("pod CIDR %v: must be an IPv4 network of /30 or larger", cidr)
	}
	return &Allocator{cidr: cidr, owners: map[netip.Addr]string{}, byUser: map[string]netip.Addr{}, next: first(cidr)}, nil
}

func first(cidr netip.Prefix) netip.Addr { return cidr.Addr().Next().Next() }

func (a *Allocator) last() netip.Addr {
	v := a.cidr.Addr().As4()
	hostBits := 32 - a.cidr.Bits()
	n := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
	n |= (1 << hostBits) - 1
	n-- // not the broadcast address
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// CIDR is the range the allocator hands out from.
func (a *Allocator) CIDR() netip.Prefix { return a.cidr }

// Total is how many addresses can be handed out.
func (a *Allocator) Total() int { return 1<<(32-a.cidr.Bits()) - 3 }

// Used is how many addresses are handed out.
func (a *Allocator) Used() int { return len(a.owners) }

// Claimed says whether a free address is still claimed elsewhere: a Pod object
// whose status lists it while it is being deleted (its sandbox gone, its address
// released), or one that did until a few seconds ago. Other nodes map the address to that Pod's identity until their watch
// sees it end, so a new pod given the address would be taken for the old one there.
// A nil Claimed claims nothing.
type Claimed func(netip.Addr) bool

// Allocate returns owner's address, choosing a free one if it has none. It scans from
// after the last allocation (Next), wrapping around, so a released address is not
// reused at once: the others come first. It passes over free addresses claimed says
// are claimed; an owner's existing address is returned even if claimed (a retried
// ADD keeps what it has). When every free address is claimed the error wraps both
// ErrExhausted and ErrClaimed.
func (a *Allocator) Allocate(owner string, claimed Claimed) (netip.Addr, error) {
	if ip, ok := a.byUser[owner]; ok {
		return ip, nil
	}
	ip, held := a.next, 0
	for range a.Total() {
		if _, used := a.owners[ip]; !used {
			if claimed == nil || !claimed(ip) {
				a.owners[ip], a.byUser[owner] = owner, ip
				a.next = a.after(ip)
				return ip, nil
			}
			held++
		}
		ip = a.after(ip)
	}
	if held > 0 {
		return netip.Addr{}, fmt.Errorf("%w: %d of the %d addresses of %v are in use and %d more are free but still listed by Pods being deleted, "+
			"or were released seconds ago (other nodes take them for those Pods until they have seen them gone); retry in a few seconds", ErrClaimed, a.Total()-held, a.Total(), a.cidr, held)
	}
	return netip.Addr{}, fmt.Errorf("%w: all %d addresses of %v are in use", ErrExhausted, a.Total(), a.cidr)
}

// after is the allocatable address after ip, the first one after the last.
func (a *Allocator) after(ip netip.Addr) netip.Addr {
	if ip.Compare(a.last()) >= 0 {
		return first(a.cidr)
	}
	return ip.Next()
}

// Next is where the next allocation's scan starts: after the last address handed
// out. Kept with the allocations (SetNext), it keeps reuse round-robin across restarts.
func (a *Allocator) Next() netip.Addr { return a.next }

// SetNext makes the next scan start at ip, as a stored pool says; an address the
// allocator never hands out is an error, changing nothing.
func (a *Allocator) SetNext(ip netip.Addr) error {
	if !a.allocatable(ip) {
		return fmt.Errorf("scan position %v is outside the allocatable range of %v", ip, a.cidr)
	}
	a.next = ip
	return nil
}

func (a *Allocator) allocatable(ip netip.Addr) bool {
	return a.cidr.Contains(ip) && ip.Compare(first(a.cidr)) >= 0 && ip.Compare(a.last()) <= 0
}

// Restore records an allocation read back from disk. An address held by another
// owner, or a second address for owner, is an error: each address has one owner and
// each owner one address.
func (a *Allocator) Restore(ip netip.Addr, owner string) error {
	if !a.allocatable(ip) {
		return fmt.Errorf("address %v of %s is outside the allocatable range of %v", ip, owner, a.cidr)
	}
	if prev, ok := a.owners[ip]; ok && prev != owner {
		return fmt.Errorf("address %v is recorded for both %s and %s", ip, prev, owner)
	}
	if prev, ok := a.byUser[owner]; ok && prev != ip {
		return fmt.Errorf("%s is recorded with both %v and %v", owner, prev, ip)
	}
	a.owners[ip], a.byUser[owner] = owner, ip
	return nil
}

// Release frees owner's address and reports it; releasing nothing is not an error.
func (a *Allocator) Release(owner string) (netip.Addr, bool) {
	ip, ok := a.byUser[owner]
	if ok {
		delete(a.byUser, owner)
		delete(a.owners, ip)
	}
	return ip, ok
}

// Owners returns a copy of the allocations, owner to address.
func (a *Allocator) Owners() map[string]netip.Addr {
	out := make(map[string]netip.Addr, len(a.byUser))
	for o, ip := range a.byUser {
		out[o] = ip
	}
	return out
}
