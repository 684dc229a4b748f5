package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/iptables"
	"github.com/myelin-net/myelin/internal/k8s"
)

// startMasquerade programs the no-masquerade set (BPF) or the nat chain (iptables)
// from the Nodes known at start, before anything is attached.
func (a *agent) startMasquerade(dp *datapath.Datapath) error {
	list, err := a.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes for the no-masquerade set: %w", err)
	}
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	return a.syncMasquerade(dp, nodes)
}

// syncMasquerade keeps the masquerading of pod traffic in step with the Nodes.
// It writes only when the no-masquerade set changed since the last successful write,
// so the periodic node resync costs no iptables runs or map updates.
func (a *agent) syncMasquerade(dp *datapath.Datapath, nodes []*corev1.Node) error {
	keep := noMasquerade(a.plan.NoMasqueradeBase, nodes)
	if a.masqApplied != nil && slices.Equal(keep, a.masqApplied) {
		return nil
	}
	if err := a.applyMasquerade(dp, keep); err != nil {
		a.masqApplied = nil
		return err
	}
	a.masqApplied = keep
	return nil
}

func (a *agent) applyMasquerade(dp *datapath.Datapath, keep []netip.Prefix) error {
	switch a.plan.Masquerade {
	case masqueradeBPF:
		if err := dp.SetNoMasquerade(keep); err != nil {
			return fmt.Errorf("write the no-masquerade set: %w", err)
		}
		return iptables.RemoveMasquerade()
	case masqueradeIPTables:
		return iptables.SyncMasquerade(a.plan.ClusterCIDR, keep)
	default:
		return iptables.RemoveMasquerade()
	}
}

// noMasquerade is the set of destinations pod traffic keeps its source for: base
// (the cluster's pods, ipv4-native-routing-cidr, every non-masquerade-cidr, see
// noMasqueradeBase) and every node's IP. Sorted and deduplicated.
func noMasquerade(base []netip.Prefix, nodes []*corev1.Node) []netip.Prefix {
	set := map[netip.Prefix]bool{}
	for _, p := range base {
		set[p] = true
	}
	for _, n := range nodes {
		if ip := k8s.NodeInternalIP(n); ip.Is4() {
			set[netip.PrefixFrom(ip, 32)] = true
		}
	}
	out := make([]netip.Prefix, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sortPrefixes(out)
	return out
}
