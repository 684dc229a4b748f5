package policy

import (
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// cidrSet is the policy CIDRs of one computation (every ipBlock CIDR and except,
// masked and deduplicated) and each ipBlock compiled for matching. Its costs grow
// with the number of prefixes, not with its square: a user with rights in one
// namespace can write an ipBlock with tens of thousands of excepts.
type cidrSet struct {
	// prefixes are sorted shortest first, then by address.
	prefixes []netip.Prefix
	has      map[netip.Prefix]bool
	// lengths are the prefix lengths in prefixes, ascending: an address has at most
	// one containing prefix of each length, found by masking it.
	lengths []int
	blocks  map[*networkingv1.IPBlock]ipBlock
	// problems are the policies whose CIDRs do not parse.
	problems []Problem
}

// ipBlock is an ipBlock peer ready to match a peer's atoms.
type ipBlock struct {
	cidr   netip.Prefix
	except map[netip.Prefix]bool
	// valid is false when the CIDR or an except is not an IPv4 CIDR: the peer
	// then matches nothing (its problem says so).
	valid bool
}

// newCIDRSet collects and compiles the ipBlocks of nps.
func newCIDRSet(nps []*networkingv1.NetworkPolicy) *cidrSet {
	s := &cidrSet{has: map[netip.Prefix]bool{}, blocks: map[*networkingv1.IPBlock]ipBlock{}}
	for _, np := range nps {
		for _, b := range policyIPBlocks(np) {
			s.addBlock(np, b)
		}
	}
	for p := range s.has {
		s.prefixes = append(s.prefixes, p)
	}
	sortPrefixes(s.prefixes)
	for _, p := range s.prefixes {
		if n := len(s.lengths); n == 0 || s.lengths[n-1] != p.Bits() {
			s.lengths = append(s.lengths, p.Bits())
		}
	}
	return s
}

// addBlock compiles b of np and adds its prefixes.
func (s *cidrSet) addBlock(np *networkingv1.NetworkPolicy, b *networkingv1.IPBlock) {
	if _, ok := s.blocks[b]; ok {
		return
	}
	blk := ipBlock{except: make(map[netip.Prefix]bool, len(b.Except)), valid: true}
	parse := func(str string) (netip.Prefix, bool) {
		p, err := netip.ParsePrefix(str)
		if err != nil || !p.Addr().Is4() {
			s.problems = append(s.problems, Problem{Policy: policyName(np),
				Message: fmt.Sprintf("ipBlock %q is not an IPv4 CIDR: the peer is ignored (fix the policy)", str)})
			blk.valid = false
			return netip.Prefix{}, false
		}
		p = p.Masked()
		s.has[p] = true
		return p, true
	}
	blk.cidr, _ = parse(b.CIDR)
	for _, e := range b.Except {
		if p, ok := parse(e); ok {
			blk.except[p] = true
		}
	}
	s.blocks[b] = blk
}

// policyIPBlocks returns the ipBlock peers of np's rules, ingress first.
func policyIPBlocks(np *networkingv1.NetworkPolicy) []*networkingv1.IPBlock {
	var out []*networkingv1.IPBlock
	for _, r := range np.Spec.Ingress {
		for _, pp := range r.From {
			if pp.IPBlock != nil {
				out = append(out, pp.IPBlock)
			}
		}
	}
	for _, r := range np.Spec.Egress {
		for _, pp := range r.To {
			if pp.IPBlock != nil {
				out = append(out, pp.IPBlock)
			}
		}
	}
	return out
}

// atomsOf returns the policy CIDRs that contain prefix, sorted as prefixes are
// (shortest first): one map lookup per prefix length in use.
func (s *cidrSet) atomsOf(prefix netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, bits := range s.lengths {
		if bits > prefix.Bits() {
			break
		}
		if c, err := prefix.Addr().Prefix(bits); err == nil && s.has[c] {
			out = append(out, c)
		}
	}
	return out
}

// matches says whether the ipBlock peer b admits a peer with atoms: its CIDR
// contains the peer and no except does.
func (s *cidrSet) matches(b *networkingv1.IPBlock, atoms []netip.Prefix) bool {
	blk, ok := s.blocks[b]
	if !ok || !blk.valid || !slices.Contains(atoms, blk.cidr) {
		return false
	}
	for _, a := range atoms {
		if blk.except[a] {
			return false
		}
	}
	return true
}
