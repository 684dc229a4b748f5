package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/policy"
	"github.com/myelin-net/myelin/internal/routing"
)

// podRanges are the PodCIDRs a pod's address must lie in to be that pod in policy
// (policy.OwnAddresses): this node's and those of the Nodes routing.Peers accepts (a
// Node's PodCIDR is what its kubelet wrote; overlapping claims go to the first), as of
// the last Node change (nodesDerived). Only the policy loop uses it.
type podRanges struct {
	nodes  *nodeWatch
	local  routing.Local
	known  *nodesDerived[map[string]netip.Prefix]
	kicks  <-chan struct{} // the policy loop computes again
	log    *slog.Logger
	logged map[string]bool // refusals already logged: each once, not every computation
}

// podRangesLogMax bounds the refusals one computation logs by name (a migration
// from a CNI with other addresses would otherwise log every pod); the rest are counted.
const podRangesLogMax = 16

func newPodRanges(nodes *nodeWatch, local routing.Local, log *slog.Logger) *podRanges {
	return &podRanges{nodes: nodes, local: local, log: log, logged: map[string]bool{}, kicks: nodes.subscribe(),
		known: newNodesDerived(nodes, func(ns []*corev1.Node) map[string]netip.Prefix { return acceptedRanges(local, ns) })}
}

// acceptedRanges are the PodCIDRs of local and of the nodes routing.Peers accepts, by
// node name.
func acceptedRanges(local routing.Local, nodes []*corev1.Node) map[string]netip.Prefix {
	ok, _ := routing.Peers(local, clusterNodes(nodes))
	out := make(map[string]netip.Prefix, len(ok)+1)
	for _, n := range ok {
		out[n.Name] = n.PodCIDR
	}
	out[local.Name] = local.PodCIDR
	return out
}

// follow pokes the policy loop after every Node change, until ctx ends.
func (r *podRanges) follow(ctx context.Context, poke func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kicks:
			poke()
		}
	}
}

// check keeps the pods whose addresses are their own and logs each refused pod
// (and address) once.
func (r *podRanges) check(pods []policy.Pod) []policy.Pod {
	ranges, err := r.known.get()
	if err != nil { // unchecked this once
		r.log.Error("policy: list Nodes for their PodCIDRs", "err", err)
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
