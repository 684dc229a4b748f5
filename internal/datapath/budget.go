package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// Per-pod budgets of the node's shared tables (docs/policy.md, "What eviction
// costs"; docs/datapath.md, "Masquerade" and "Service load balancing"): a table
// one pod can fill for every other pod of the node (the NetworkPolicy connections
// an LRU evicts, the masquerade and Service flows whose insert fails when full) has a list of the pods holding
// more than their share at the agent's last GC round. The datapath drops a listed
// pod's packets that would need a new entry, with the table's own reason, so one
// pod's flood fills the table for one round at most. The list is pinned, and so is
// the table's entry of myelin_budgets: whether the list holds a pod (so a new entry
// costs one array read while none is) and the budget the last Load configured, so an
// agent that adopts the pinned maps before it has its configuration (OpenPinned)
// applies the budgets with the programs that run.

// podCounts counts a table's entries (or flows) by the local pod holding them, by
// its address as the datapath keys it (network order).
type podCounts map[uint32]uint32

// add counts one for pod (nothing for an address that is no IPv4 one).
func (h podCounts) add(pod netip.Addr) {
	if k, ok := podKey(pod); ok {
		h[k]++
	}
}

// podKey is pod's address as the datapath keys it, if it is an IPv4 one.
func podKey(pod netip.Addr) (uint32, bool) {
	if !pod.Is4() {
		return 0, false
	}
	return networkUint32(pod), true
}

// over returns the pods holding more than budget, with their counts.
func (h podCounts) over(budget uint32) map[uint32]uint32 {
	out := map[uint32]uint32{}
	for addr, n := range h {
		if n > budget {
			out[addr] = n
		}
	}
	return out
}

// The tables' entries of myelin_budgets (bpf/lib/types.h enum budget_table).
const (
	budgetPolicyCT uint32 = 0
	budgetNAT      uint32 = 1
	budgetLBCT     uint32 = 2
)

// podBudget is one table's budget: its list of pods over it and its entry of
// myelin_budgets, whose any_over says the list holds one.
type podBudget struct {
	what string // what a pod holds, for errors: "policy connections"
	key  string // the configuration key of the budget
	// max is the budget, 0 none (the datapath reads no list): the configured one,
	// or on a datapath adopted before Load the one the last Load wrote (0 from a
	// build without myelin_budgets: not known).
	max   uint32
	list  *ebpf.Map
	state *ebpf.Map // myelin_budgets
	index uint32    // the table's entry of state
}

// sync makes the list hold exactly the pods of held over the budget and any_over
// say whether it holds any. Without a budget it leaves the list alone (the first
// round of an agent with a budget rewrites it) and clears the table's entry: an
// adopted round that ran while Load wrote it may have put the last budget back, which
// a later adoption would apply.
func (b podBudget) sync(held podCounts) error {
	if b.max == 0 {
		return b.setState(false)
	}
	over := held.over(b.max)
	// The biggest holders, as many as the list has room for (more pods can be
	// over a small budget than it holds, with pods of other nodes listable):
	// the others are unlisted first, so a new big holder takes the place of a
	// smaller one listed at an earlier round.
	addrs := slices.SortedFunc(maps.Keys(over), func(a, b uint32) int { return cmp.Compare(over[b], over[a]) })
	top := addrs[:min(len(addrs), int(b.list.MaxEntries()))]
	var listed []uint32
	if err := dumpEntries(b.list, func(addr, _ uint32) { listed = append(listed, addr) }); err != nil {
		return fmt.Errorf("list pods over their budget of %s: %w", b.what, err)
	}
	inTop := make(map[uint32]bool, len(top))
	for _, addr := range top {
		inTop[addr] = true
	}
	for _, addr := range listed {
		if inTop[addr] {
			continue
		}
		if err := b.list.Delete(&addr); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unlist pod %s of %s: %w", addrFromNetwork(addr), b.what, err)
		}
	}
	var first error
	failed := 0
	for _, addr := range top {
		n := over[addr]
		if err := b.list.Put(&addr, &n); err != nil {
			if failed++; first == nil {
				first = fmt.Errorf("pod %s holding %d: %w", addrFromNetwork(addr), n, err)
			}
		}
	}
	var unlisted error
	switch {
	case failed != 0:
		unlisted = fmt.Errorf("list pods over their budget of %s (%s %d): %d of %d not listed, the first %w",
			b.what, b.key, b.max, failed+len(addrs)-len(top), len(addrs), first)
	case len(top) < len(addrs):
		unlisted = fmt.Errorf("list pods over their budget of %s (%s %d): %d of %d not listed (the list holds %d), the biggest pod %s holding %d",
			b.what, b.key, b.max, len(addrs)-len(top), len(addrs), len(top), addrFromNetwork(addrs[len(top)]), over[addrs[len(top)]])
	}
	return errors.Join(unlisted, b.setState(len(top) > failed))
}

// setState writes the table's entry of myelin_budgets: its budget and whether the
// list holds a pod.
func (b podBudget) setState(anyOver bool) error {
	st := myelinBudgetState{Max: b.max}
	if anyOver {
		st.AnyOver = 1
	}
	if err := b.state.Put(b.index, st); err != nil {
		return fmt.Errorf("write the budget state of %s: %w", b.what, err)
	}
	return nil
}

// restore writes the table's budget at Load, with any_over on when the pinned list
// a previous agent wrote holds a pod, so a restart does not lift the budget until
// the first GC round.
func (b podBudget) restore() error {
	if b.max == 0 {
		return b.setState(false)
	}
	var k uint32
	if err := b.list.NextKey(nil, &k); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return b.setState(false)
		}
		return fmt.Errorf("read the pods over their budget of %s: %w", b.what, err)
	}
	return b.setState(true)
}

// pinnedBudgets reads the budgets the last Load wrote into myelin_budgets: an
// adopted datapath counts against them (OpenPinned). An entry that can't be read
// is 0, no budget, as before.
func pinnedBudgets(m *ebpf.Map) (policyCT, nat, lbCT uint32) {
	var st [3]myelinBudgetState
	for i := range st {
		_ = m.Lookup(uint32(i), &st[i])
	}
	return st[budgetPolicyCT].Max, st[budgetNAT].Max, st[budgetLBCT].Max
}

// listed returns the pods the list holds with the count each had at the last
// round.
func (b podBudget) listed() (map[netip.Addr]int, error) {
	over := map[netip.Addr]int{}
	err := dumpEntries(b.list, func(addr, n uint32) { over[addrFromNetwork(addr)] = int(n) })
	if err != nil {
		return nil, fmt.Errorf("list pods over their budget of %s: %w", b.what, err)
	}
	return over, nil
}

// policyCTBudget is the budget of myelin_policy_ct (policy-ct-pod-max).
func (d *Datapath) policyCTBudget() podBudget {
	return podBudget{what: "policy connections", key: "policy-ct-pod-max", max: d.cfg.PolicyCTPodMax,
		list: d.objs.MyelinPolicyCtOver, state: d.objs.MyelinBudgets, index: budgetPolicyCT}
}

// natBudget is the budget of myelin_snat in flows (nat-pod-max).
func (d *Datapath) natBudget() podBudget {
	return podBudget{what: "masqueraded flows", key: "nat-pod-max", max: d.cfg.NATPodMax,
		list: d.objs.MyelinSnatOver, state: d.objs.MyelinBudgets, index: budgetNAT}
}

// lbCTBudget is the budget of myelin_lb_ct in flows (lb-ct-pod-max).
func (d *Datapath) lbCTBudget() podBudget {
	return podBudget{what: "Service flows", key: "lb-ct-pod-max", max: d.cfg.LBCTPodMax,
		list: d.objs.MyelinLbCtOver, state: d.objs.MyelinBudgets, index: budgetLBCT}
}

// PodsOverBudget are the pods over their share of the node's shared tables, with
// what each held at the last GC round, and the budgets (0: none).
type PodsOverBudget struct {
	PolicyCT, NAT, ServiceCT          map[netip.Addr]int
	PolicyCTMax, NATMax, ServiceCTMax int
}

// PodsOverBudget returns the pods the budgets' lists hold.
func (d *Datapath) PodsOverBudget() (PodsOverBudget, error) {
	out := PodsOverBudget{PolicyCTMax: int(d.cfg.PolicyCTPodMax), NATMax: int(d.cfg.NATPodMax), ServiceCTMax: int(d.cfg.LBCTPodMax)}
	var errs [3]error
	out.PolicyCT, errs[0] = d.policyCTBudget().listed()
	out.NAT, errs[1] = d.natBudget().listed()
	out.ServiceCT, errs[2] = d.lbCTBudget().listed()
	return out, errors.Join(errs[:]...)
}
