package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/myelin-net/myelin/internal/datapath"
)

// Input is everything a node's policy state depends on.
type Input struct {
	// Node is this node's name: its pods are the ones enforced here.
	Node string
	// Pods are every pod of the cluster with an IPv4 (PodOf).
	Pods []Pod
	// Namespaces are the labels of every namespace, by name.
	Namespaces map[string]map[string]string
	Policies   []*networkingv1.NetworkPolicy
}

// Key names one allow entry of a local pod: a peer identity and a direction.
type Key struct {
	Identity uint32
	Egress   bool
}

// Endpoint is the computed state of one local pod.
type Endpoint struct {
	Pod     string // namespace/name
	IP      netip.Addr
	Flags   datapath.PolicyFlags
	Entries map[Key][]datapath.PolicyPort
	// IngressPolicies and EgressPolicies isolate the pod (namespace/name).
	IngressPolicies, EgressPolicies []string
	// Problems are what could not be represented (the pod fails closed).
	Problems []string
	// overflow: its entries were not all built, its namespace (or it alone) asking
	// more than EntryBudget; admitEntries refuses it.
	overflow bool
}

// Problem is something a policy asks that is not enforced as written.
type Problem struct {
	Policy  string // namespace/name
	Message string
}

func (p Problem) String() string { return p.Policy + ": " + p.Message }

// State is what the datapath of a node must hold.
type State struct {
	IPCache   map[netip.Prefix]uint32
	Endpoints map[netip.Addr]*Endpoint
	Problems  []Problem
	// Identities is the number of identities in use (world included).
	Identities int
}

type identity struct {
	id uint32
	peer
}

// Compute returns the datapath state of in.Node's pods. ids allocates the
// identity numbers (and keeps them across calls); numbers of keys no
// longer in use are released.
func Compute(in Input, ids *Identities) State {
	c := compile(in.Policies)
	cidrs := c.cidrs
	st := State{IPCache: map[netip.Prefix]uint32{}, Endpoints: map[netip.Addr]*Endpoint{}, Problems: cidrs.problems}
	used := map[string]bool{}
	byKey := map[string]*identity{}
	keys := newKeyer()
	idOf := func(p peer) uint32 {
		k := keys.key(p)
		used[k] = true
		if i, ok := byKey[k]; ok {
			return i.id
		}
		i := &identity{id: ids.get(k), peer: p}
		byKey[k] = i
		return i.id
	}
	idOf(peer{}) // world: always 2
	for _, c := range cidrs.prefixes {
		st.IPCache[c] = idOf(peer{atoms: cidrs.atomsOf(c)})
	}
	local := []Pod{}
	for _, pod := range in.Pods {
		p := podPeer(pod, in.Namespaces, cidrs)
		st.IPCache[netip.PrefixFrom(pod.IP, 32)] = idOf(p)
		if pod.Node == in.Node {
			local = append(local, pod)
		}
	}
	ids.release(used)
	all := make([]*identity, 0, len(byKey))
	for _, i := range byKey {
		all = append(all, i)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].id < all[b].id })
	st.Identities = len(all)
	peers := newRulePeers(c, all)
	// In name order, so a namespace's pods past EntryBudget are the same ones every
	// computation: once the pods before them asked for the whole budget, their entries
	// are not built at all (the memory and time of a rule of many peers on many pods:
	// a prefix cut, where admitEntries would skip to a later pod that fits), and
	// admitEntries refuses them.
	slices.SortFunc(local, func(a, b Pod) int { return strings.Compare(a.Ref(), b.Ref()) })
	asked := map[string]int{} // entries built per namespace so far
	for _, pod := range local {
		ep := endpointState(pod, podPeer(pod, in.Namespaces, cidrs), in.Policies, peers, &st, asked[pod.Namespace] >= EntryBudget)
		if !ep.overflow { // one refused anyway costs the others nothing
			asked[pod.Namespace] += len(ep.Entries)
		}
		st.Endpoints[pod.IP] = ep
	}
	admitEntries(&st) // each namespace within its share of the node's policy map
	return st
}

// ruleRef names one rule of a policy.
type ruleRef struct {
	np     *networkingv1.NetworkPolicy
	egress bool
	index  int
}

// rulePeers are the identities each rule's peers match, found once per
// computation: which peers a rule admits does not depend on the local pod it
// selects (its named ports do), so every pod a policy selects shares the answer
// instead of matching every peer against every identity again. A selector peer is
// matched against the pods of the namespaces it can select only: its policy's own,
// or those its namespaceSelector matches (evaluated once per namespace); an ipBlock
// peer against every identity.
type rulePeers struct {
	c   *compiled
	all []*identity // by number
	// byNamespace are the pods' identities by namespace, by number.
	byNamespace map[string][]*identity
	// byPortName are the identities with a container port of that name, by number.
	byPortName map[string][]*identity
	matched    map[ruleRef][]*identity
	namedCache map[ruleRef][]namedEntry // namedPorts' answers
}

// namedEntry is what an egress rule's named ports allow to one identity.
type namedEntry struct {
	id    uint32
	ports []datapath.PolicyPort
}

func newRulePeers(c *compiled, all []*identity) *rulePeers {
	rp := &rulePeers{c: c, all: all, byNamespace: map[string][]*identity{}, byPortName: map[string][]*identity{},
		matched: map[ruleRef][]*identity{}, namedCache: map[ruleRef][]namedEntry{}}
	for _, i := range all {
		if i.pod {
			rp.byNamespace[i.namespace] = append(rp.byNamespace[i.namespace], i)
		}
		for j, np := range i.ports {
			if !slices.ContainsFunc(i.ports[:j], func(o NamedPort) bool { return o.Name == np.Name }) {
				rp.byPortName[np.Name] = append(rp.byPortName[np.Name], i)
			}
		}
	}
	return rp
}

// namedPorts returns what the named ports of the egress rule r (its ports; to: it has
// peers, of(r) found them) allow, per identity they resolve on. Neither depends on the
// local pod: found once per rule and computation, from the smaller of the rule's peers
// and the identities with a port of one of its names (named).
func (rp *rulePeers) namedPorts(r ruleRef, ports []networkingv1.NetworkPolicyPort, to bool) []namedEntry {
	if es, ok := rp.namedCache[r]; ok {
		return es
	}
	withName := 0
	for _, p := range ports {
		if p.Port != nil && p.Port.StrVal != "" {
			withName += len(rp.byPortName[p.Port.StrVal])
		}
	}
	candidates := rp.matched[r]
	if !to || withName < len(candidates) {
		candidates = rp.named(r, ports, to)
	}
	var es []namedEntry
	for _, i := range candidates {
		if resolved, _ := rulePorts(ports, i.peer, false, true); len(resolved) > 0 {
			es = append(es, namedEntry{id: i.id, ports: resolved})
		}
	}
	rp.namedCache[r] = es
	return es
}

// named returns the identities a named port of the rule r (its ports) can resolve on:
// those with a port of one of its names, and of its peers when to (r has peers: of
// them only), by number. One lookup per name, not a resolution per identity: a policy
// of many named-port rules without peers cost rules × identities per selected pod
// (6,000 rules over 5,000 identities took 11.6 s a computation). Called once per rule
// (namedPorts caches the answer).
func (rp *rulePeers) named(r ruleRef, ports []networkingv1.NetworkPolicyPort, to bool) []*identity {
	var in map[*identity]bool
	if to {
		in = make(map[*identity]bool, len(rp.matched[r]))
		for _, i := range rp.matched[r] {
			in[i] = true
		}
	}
	hit := map[*identity]bool{}
	var out []*identity
	for _, p := range ports {
		if p.Port == nil || p.Port.StrVal == "" {
			continue
		}
		for _, i := range rp.byPortName[p.Port.StrVal] {
			if !hit[i] && (!to || in[i]) {
				hit[i] = true
				out = append(out, i)
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// of returns the identities that one of pps (the rule r, not empty) matches, by number.
func (rp *rulePeers) of(r ruleRef, pps []networkingv1.NetworkPolicyPeer) []*identity {
	if ids, ok := rp.matched[r]; ok {
		return ids
	}
	hit := map[*identity]bool{}
	match := func(candidates []*identity, matches func(peer) bool) {
		for _, i := range candidates {
			if !hit[i] && matches(i.peer) {
				hit[i] = true
			}
		}
	}
	for _, pp := range pps {
		switch {
		case pp.IPBlock != nil:
			match(rp.all, func(p peer) bool { return peerMatches(r.np, pp, p, rp.c) })
		case pp.NamespaceSelector == nil:
			// nothing when PodSelector is nil too
			match(rp.byNamespace[r.np.Namespace], func(p peer) bool { return peerMatches(r.np, pp, p, rp.c) })
		default:
			for _, ids := range rp.byNamespace {
				// A namespace's pods share its labels (podPeer): its selector is
				// evaluated once, then only the podSelector per pod.
				if ok, err := rp.c.selectors.matches(pp.NamespaceSelector, ids[0].nsLabels); err == nil && ok {
					match(ids, func(p peer) bool { return podSelected(pp, p, rp.c) })
				}
			}
		}
	}
	ids := make([]*identity, 0, len(hit))
	for i := range hit {
		ids = append(ids, i)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a].id < ids[b].id })
	rp.matched[r] = ids
	return ids
}

// podPeer is pod as a peer.
func podPeer(pod Pod, namespaces map[string]map[string]string, cidrs *cidrSet) peer {
	return peer{pod: true, namespace: pod.Namespace, labels: pod.Labels, nsLabels: namespaces[pod.Namespace],
		ports: pod.Ports, atoms: cidrs.atomsOf(netip.PrefixFrom(pod.IP, 32))}
}

// endpointState computes one local pod's flags and entries; with overflow (its
// namespace's pods asked EntryBudget already) its entries are not built.
func endpointState(pod Pod, self peer, nps []*networkingv1.NetworkPolicy, peers *rulePeers, st *State, overflow bool) *Endpoint {
	ep := &Endpoint{Pod: pod.Ref(), IP: pod.IP, Entries: map[Key][]datapath.PolicyPort{}}
	add := func(k Key, ports []datapath.PolicyPort) {
		if len(ports) == 0 || ep.overflow {
			return
		}
		// Past the budget (its namespace's, or its own: never admitted) it stops
		// building; a pod that asks for no entry (not isolated, or denying all) is not
		// refused for its namespace's.
		if _, ok := ep.Entries[k]; overflow || !ok && len(ep.Entries) >= EntryBudget {
			ep.overflow = true
			return
		}
		ep.Entries[k] = append(ep.Entries[k], ports...)
	}
	fail := func(np *networkingv1.NetworkPolicy, egress bool, err error) {
		msg := fmt.Sprintf("%s: %v: not enforced as written, the pod fails closed", pod.Ref(), err)
		st.Problems = append(st.Problems, Problem{Policy: policyName(np), Message: msg})
		ep.Problems = append(ep.Problems, policyName(np)+": "+err.Error())
		ep.Flags |= incompleteFlag(egress)
	}
	// A policy over the CIDR budget has its problem once (newCIDRSet); each pod it
	// selects fails closed in the directions of its ipBlocks.
	overBudget := func(np *networkingv1.NetworkPolicy, egress bool) {
		if peers.c.cidrs.overBudget(np, egress) {
			ep.Problems = append(ep.Problems, policyName(np)+": ipBlocks over the namespace's policy CIDR budget: not enforced")
			ep.Flags |= incompleteFlag(egress)
		}
	}
	for _, np := range nps {
		if !selects(peers.c.selectors, np, pod) {
			continue
		}
		ingress, egress := policyTypes(np)
		if ingress {
			ep.Flags |= datapath.PolicyIngress
			ep.IngressPolicies = append(ep.IngressPolicies, policyName(np))
			overBudget(np, false)
			for i, r := range np.Spec.Ingress {
				if err := ingressRule(ruleRef{np: np, index: i}, r, self, peers, add); err != nil {
					fail(np, false, err)
				}
			}
		}
		if egress {
			ep.Flags |= datapath.PolicyEgress
			ep.EgressPolicies = append(ep.EgressPolicies, policyName(np))
			overBudget(np, true)
			for i, r := range np.Spec.Egress {
				if err := egressRule(ruleRef{np: np, egress: true, index: i}, r, peers, add); err != nil {
					fail(np, true, err)
				}
			}
		}
	}
	normalize(ep)
	return ep
}

// ingressRule adds the entries of one ingress rule of the pod self: its ports (named
// ones resolve against self, the same for every peer) for any peer or per peer
// identity the rule admits.
func ingressRule(ref ruleRef, r networkingv1.NetworkPolicyIngressRule, self peer, peers *rulePeers,
	add func(Key, []datapath.PolicyPort)) error {
	ports, err := rulePorts(r.Ports, self, true, true)
	if err != nil {
		return err
	}
	if len(r.From) == 0 {
		add(Key{Identity: datapath.IdentityAny}, ports)
		return nil
	}
	for _, i := range peers.of(ref, r.From) {
		add(Key{Identity: i.id}, ports)
	}
	return nil
}

// egressRule adds the entries of one egress rule: numeric ports per peer
// (or for any peer), named ports per peer identity, which fixes them.
func egressRule(ref ruleRef, r networkingv1.NetworkPolicyEgressRule, peers *rulePeers,
	add func(Key, []datapath.PolicyPort)) error {
	numeric, err := rulePorts(r.Ports, peer{}, true, false)
	if err != nil {
		return err
	}
	if len(r.To) == 0 {
		add(Key{Identity: datapath.IdentityAny, Egress: true}, numeric)
	} else {
		for _, i := range peers.of(ref, r.To) {
			add(Key{Identity: i.id, Egress: true}, numeric)
		}
	}
	if hasNamedPort(r.Ports) {
		for _, e := range peers.namedPorts(ref, r.Ports, len(r.To) > 0) {
			add(Key{Identity: e.id, Egress: true}, e.ports)
		}
	}
	return nil
}

func incompleteFlag(egress bool) datapath.PolicyFlags {
	if egress {
		return datapath.PolicyEgressIncomplete
	}
	return datapath.PolicyIngressIncomplete
}

// normalize merges each entry's ranges; an entry with more ranges than the
// datapath holds is dropped and its direction marked incomplete.
func normalize(ep *Endpoint) {
	for k, ports := range ep.Entries {
		merged := mergePorts(ports)
		if len(merged) > datapath.PolicyPortsMax {
			delete(ep.Entries, k)
			ep.Flags |= incompleteFlag(k.Egress)
			ep.Problems = append(ep.Problems, fmt.Sprintf("identity %d: %d port ranges, the datapath holds %d: that peer is denied",
				k.Identity, len(merged), datapath.PolicyPortsMax))
			continue
		}
		ep.Entries[k] = merged
	}
}

// mergePorts sorts ranges and merges overlapping or adjacent ones of one
// protocol; an all-protocols range swallows everything.
func mergePorts(in []datapath.PolicyPort) []datapath.PolicyPort {
	for _, p := range in {
		if p.Proto == 0 {
			return []datapath.PolicyPort{{}}
		}
	}
	ps := slices.Clone(in)
	sort.Slice(ps, func(a, b int) bool {
		if ps[a].Proto != ps[b].Proto {
			return ps[a].Proto < ps[b].Proto
		}
		return ps[a].Lo < ps[b].Lo
	})
	var out []datapath.PolicyPort
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Proto == p.Proto && uint32(p.Lo) <= uint32(out[n-1].Hi)+1 {
			if p.Hi > out[n-1].Hi {
				out[n-1].Hi = p.Hi
			}
			continue
		}
		out = append(out, p)
	}
	return out
}

// sortPrefixes orders prefixes shortest first, then by address.
func sortPrefixes(ps []netip.Prefix) {
	sort.Slice(ps, func(a, b int) bool {
		if ps[a].Bits() != ps[b].Bits() {
			return ps[a].Bits() < ps[b].Bits()
		}
		return ps[a].Addr().Less(ps[b].Addr())
	})
}
