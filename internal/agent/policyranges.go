package agent

import (
	"log/slog"
	"net/netip"
	"sort"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/myelin-net/myelin/internal/policy"
	"github.com/myelin-net/myelin/internal/routing"
)

// podRanges are the PodCIDRs a pod's address must lie in to be that pod in policy
// (policy.OwnAddresses): this node's and those of the Nodes routing.Peers accepts (a
// Node's PodCIDR is what its kubelet wrote; overlapping claims go to the first). They
// are computed again only after a Node changed (routing.Peers is ~10 ms at 5,000
// Nodes); the kick is taken before the list, so a change meanwhile is seen next time.
// Only the policy loop uses it.
type podRanges struct {
	nodes   *nodeWatch
	local   routing.Local
	changed <-chan struct{} // drops known
	kicks   <-chan struct{} // the policy loop computes again
	log     *slog.Logger

	known  map[string]netip.Prefix
	logged map[string]bool // refusals already logged: each once, not every computation
}

// podRangesLogMax bounds the refusals one computation logs by name (a migration
// from a CNI with other addresses would otherwise log every pod); the rest are counted.
const podRangesLogMax = 16

func newPodRanges(nodes *nodeWatch, local routing.Local, log *slog.Logger) *podRanges {
	return &podRanges{nodes: nodes, local: local, changed: nodes.subscribe(), kicks: nodes.subscribe(), log: log,
		logged: map[string]bool{}}
}

// get returns the ranges by node name; nil when the Nodes can't be listed (the
// caller then leaves the pods unchecked this once and logs nothing new).
func (r *podRanges) get() map[string]netip.Prefix {
	select {
	case <-r.changed:
	default:
		if r.known != nil {
			return r.known
		}
	}
	nodes, err := r.nodes.lister.List(labels.Everything())
	if err != nil {
		r.log.Error("policy: list Nodes for their PodCIDRs", "err", err)
		return nil
	}
	ok, _ := routing.Peers(r.local, clusterNodes(nodes))
	known := make(map[string]netip.Prefix, len(ok)+1)
	for _, n := range ok {
		known[n.Name] = n.PodCIDR
	}
	known[r.local.Name] = r.local.PodCIDR
	r.known = known
	return known
}

// check keeps the pods whose addresses are their own and logs each refused pod
// (and address) once.
func (r *podRanges) check(pods []policy.Pod) []policy.Pod {
	ranges := r.get()
	if ranges == nil {
		return pods
	}
	kept, refused := policy.OwnAddresses(pods, r.local.Name, ranges)
	now := make(map[string]bool, len(refused))
	sort.Slice(refused, func(i, j int) bool { return refused[i].Ref() < refused[j].Ref() })
	logged, more := 0, 0
	for _, p := range refused {
		key := p.Ref() + " " + p.IP.String()
		now[key] = true
		switch {
		case r.logged[key]:
		case logged == podRangesLogMax:
			more++
		default:
			logged++
			cidr, ok := ranges[p.Node]
			r.log.Warn("policy: a pod's address is not inside its node's PodCIDR: it is no peer in policy (its node wrote a status this cluster's addressing refuses)",
				"pod", p.Ref(), "ip", p.IP, "node", p.Node, "nodePodCIDR", rangeText(cidr, ok))
		}
	}
	if more > 0 {
		r.log.Warn("policy: more pods' addresses are not inside their nodes' PodCIDRs", "pods", more, "refused in all", len(refused))
	}
	r.logged = now
	return kept
}

func rangeText(cidr netip.Prefix, ok bool) string {
	if !ok {
		return "none accepted (the Node has none, or routing refuses it)"
	}
	return cidr.String()
}
