package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/myelin-net/myelin/internal/datapath"
)

// EntryBudget is how many myelin_policy entries the node's isolated pods may ask for
// together: half the map, since an apply writes a pod's new entries before it removes
// its stale ones (steps 1 and 4 of applyPolicy), so a namespace changing its peers
// briefly holds both. Namespaces share it max-min fairly (cidrShare): one asking for at
// most EntryBudget / (namespaces with isolated pods on the node) always gets it all.
const EntryBudget = datapath.PolicyMax / 2

// admitEntries keeps every namespace's pods within its share of EntryBudget: a
// namespace asking more keeps its pods' entries in pod name order, each pod whole or
// not at all, skipping those that would take it past the share (and those Compute did
// not build: asking more than EntryBudget alone, or after the namespace's earlier
// pods asked for all of it); a skipped pod has no entries and fails closed in the
// directions it is isolated in, with a problem saying why. Before, one tenant's rules
// of many peers (a namespaceSelector: {} on pods of many identities) filled the
// node's map, and other tenants' pods failed closed. The unit is the namespace: a
// tenant with pods of many namespaces on the node gets as many shares, and a pod
// asking more than its namespace's share alone fails closed whole.
func admitEntries(st *State) {
	byNamespace, demand := map[string][]*Endpoint{}, map[string]int{}
	for _, ep := range st.Endpoints {
		ns, _, _ := strings.Cut(ep.Pod, "/")
		byNamespace[ns] = append(byNamespace[ns], ep)
		demand[ns] += len(ep.Entries)
		if ep.overflow { // asked more than was built: more than the whole budget
			demand[ns] = max(demand[ns], EntryBudget+1)
		}
	}
	share := cidrShare(slices.Collect(maps.Values(demand)), EntryBudget)
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		if demand[ns] <= share {
			continue
		}
		eps := byNamespace[ns]
		slices.SortFunc(eps, func(a, b *Endpoint) int { return strings.Compare(a.Pod, b.Pod) })
		used := 0
		for _, ep := range eps {
			if !ep.overflow && used+len(ep.Entries) <= share {
				used += len(ep.Entries)
				continue
			}
			// Nothing of other namespaces in the text: it goes to this one's Events.
			asks := fmt.Sprintf("its %d policy entries", len(ep.Entries))
			if ep.overflow {
				asks = "its policy entries (not counted: the namespace's pods here ask more than the whole budget)"
			}
			msg := fmt.Sprintf("pod %s: %s would take namespace %s past its share of this node's policy "+
				"map (the namespace's pods here ask %d or more): the pod fails closed; select fewer peers per rule "+
				"(a namespaceSelector or podSelector over fewer pod label sets) or spread the namespace's pods over more nodes",
				ep.Pod, asks, ns, demand[ns])
			refuseEntries(st, ep, msg)
		}
	}
}

// refuseEntries drops ep's entries: it fails closed in its isolated directions.
func refuseEntries(st *State, ep *Endpoint, msg string) {
	ep.Entries = map[Key][]datapath.PolicyPort{}
	if ep.Flags&datapath.PolicyIngress != 0 {
		ep.Flags |= datapath.PolicyIngressIncomplete
	}
	if ep.Flags&datapath.PolicyEgress != 0 {
		ep.Flags |= datapath.PolicyEgressIncomplete
	}
	ep.Problems = append(ep.Problems, msg)
	policy := "" // the same one every computation: the first by name
	if pols := append(slices.Clone(ep.IngressPolicies), ep.EgressPolicies...); len(pols) > 0 {
		policy = slices.Min(pols)
	}
	st.Problems = append(st.Problems, Problem{Policy: policy, Message: msg})
}
