package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/myelin-net/myelin/internal/datapath"

	networkingv1 "k8s.io/api/networking/v1"
)

// CIDRBudget is how many prefixes the ipBlocks of all policies may put into
// myelin_ipcache, one table per node shared with every pod /32 of the cluster:
// an eighth of it, leaving 57,344 for pods. Namespaces share it fairly
// (cidrShare); a policy past its namespace's share is refused (its ipBlock peers
// match nothing, the pods it selects fail closed), never another namespace's.
const CIDRBudget = datapath.IPCacheMax / 8

// cidrSet is the policy CIDRs of one computation (every ipBlock CIDR and except
// of the policies within the budget, masked and deduplicated) and each ipBlock
// compiled for matching. Its costs grow with the number of prefixes, not with its
// square: a user with rights in one namespace can write an ipBlock with tens of
// thousands of excepts.
type cidrSet struct {
	// prefixes are sorted shortest first, then by address.
	prefixes []netip.Prefix
	has      map[netip.Prefix]bool
	// lengths are the prefix lengths in prefixes, ascending: an address has at most
	// one containing prefix of each length, found by masking it.
	lengths []int
	blocks  map[*networkingv1.IPBlock]ipBlock
	// refused are the policies over their namespace's share of CIDRBudget.
	refused map[*networkingv1.NetworkPolicy]bool
	// problems are the policies whose CIDRs do not parse or do not fit.
	problems []Problem
}

// ipBlock is an ipBlock peer ready to match a peer's atoms.
type ipBlock struct {
	cidr   netip.Prefix
	except map[netip.Prefix]bool
	// valid is false when the CIDR or an except is not an IPv4 CIDR, or the
	// policy is over budget: the peer then matches nothing (its problem says so).
	valid bool
}

// newCIDRSet compiles the ipBlocks of nps and admits their prefixes within
// CIDRBudget.
func newCIDRSet(nps []*networkingv1.NetworkPolicy) *cidrSet {
	s := &cidrSet{has: map[netip.Prefix]bool{}, blocks: map[*networkingv1.IPBlock]ipBlock{},
		refused: map[*networkingv1.NetworkPolicy]bool{}}
	byNamespace := map[string][]*networkingv1.NetworkPolicy{}
	prefixes := map[*networkingv1.NetworkPolicy]map[netip.Prefix]bool{}
	for _, np := range nps {
		own := map[netip.Prefix]bool{}
		for _, b := range policyIPBlocks(np) {
			s.compile(np, b, own)
		}
		if len(own) > 0 {
			byNamespace[np.Namespace] = append(byNamespace[np.Namespace], np)
			prefixes[np] = own
		}
	}
	s.admit(byNamespace, prefixes)
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

// compile compiles b of np and adds its prefixes to own.
func (s *cidrSet) compile(np *networkingv1.NetworkPolicy, b *networkingv1.IPBlock, own map[netip.Prefix]bool) {
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
		own[p] = true
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

// admit adds the prefixes of the policies within their namespace's share of
// CIDRBudget and refuses the others: a namespace whose policies ask for no more
// than the share get them all; one asking more gets its policies in name order,
// each whole or not at all, skipping those that would take it past the share.
func (s *cidrSet) admit(byNamespace map[string][]*networkingv1.NetworkPolicy, prefixes map[*networkingv1.NetworkPolicy]map[netip.Prefix]bool) {
	demand := map[string]int{}
	for ns, nps := range byNamespace {
		union := map[netip.Prefix]bool{}
		for _, np := range nps {
			maps.Copy(union, prefixes[np])
		}
		demand[ns] = len(union)
	}
	share := cidrShare(slices.Collect(maps.Values(demand)), CIDRBudget)
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		nps := slices.Clone(byNamespace[ns])
		slices.SortFunc(nps, func(a, b *networkingv1.NetworkPolicy) int { return strings.Compare(a.Name, b.Name) })
		used := map[netip.Prefix]bool{}
		for _, np := range nps {
			more := 0
			for p := range prefixes[np] {
				if !used[p] {
					more++
				}
			}
			if len(used)+more > share {
				s.refuse(np, len(prefixes[np]), len(used), share, len(byNamespace))
				continue
			}
			maps.Copy(used, prefixes[np])
			maps.Copy(s.has, prefixes[np])
		}
	}
}

// refuse marks np over budget: its ipBlocks match nothing.
func (s *cidrSet) refuse(np *networkingv1.NetworkPolicy, own, used, share, namespaces int) {
	s.refused[np] = true
	for _, b := range policyIPBlocks(np) {
		blk := s.blocks[b]
		blk.valid = false
		s.blocks[b] = blk
	}
	s.problems = append(s.problems, Problem{Policy: policyName(np), Message: fmt.Sprintf(
		"its ipBlocks hold %d distinct prefixes (CIDRs and excepts), which with the %d of namespace %s's "+
			"policies before it (by name) exceed the namespace's share of the node's policy CIDR budget: %d "+
			"(%d shared by %d namespaces with ipBlocks): its ipBlock peers match nothing and the pods it selects "+
			"fail closed in their directions; write fewer, wider prefixes (merge excepts) or split the rule "+
			"across fewer addresses", own, used, np.Namespace, share, CIDRBudget, namespaces)})
}

// cidrShare is the most prefixes each namespace may hold when namespaces asking
// demands share budget max-min fairly: the largest share such that the sum of
// min(demand, share) is within budget (budget if every demand fits). A namespace
// asking at most budget / len(demands) is never refused, whatever the others ask.
func cidrShare(demands []int, budget int) int {
	slices.Sort(demands)
	left := budget
	for i, d := range demands {
		fair := left / (len(demands) - i)
		if d > fair {
			return fair
		}
		left -= d
	}
	return budget
}

// overBudget says whether np's ipBlocks are refused and it has some in a rule
// of that direction: the pods it selects fail closed there.
func (s *cidrSet) overBudget(np *networkingv1.NetworkPolicy, egress bool) bool {
	if !s.refused[np] {
		return false
	}
	if egress {
		for _, r := range np.Spec.Egress {
			if slices.ContainsFunc(r.To, isIPBlock) {
				return true
			}
		}
		return false
	}
	for _, r := range np.Spec.Ingress {
		if slices.ContainsFunc(r.From, isIPBlock) {
			return true
		}
	}
	return false
}

func isIPBlock(pp networkingv1.NetworkPolicyPeer) bool { return pp.IPBlock != nil }

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
