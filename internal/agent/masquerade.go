package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/iptables"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/kube"
)

// noMasqueradeSet is the datapath's no-masquerade set (datapath.Datapath).
type noMasqueradeSet interface {
	SetNoMasquerade([]netip.Prefix) error
}

// natChain is the iptables masquerade chain (internal/iptables); a field of
// masqueradeLoop so a unit test can see what each mode writes.
type natChain interface {
	Sync(cluster netip.Prefix, keep []netip.Prefix) error
	Remove() error
}

// iptablesNAT is the real natChain.
type iptablesNAT struct{}

func (iptablesNAT) Sync(cluster netip.Prefix, keep []netip.Prefix) error {
	return iptables.SyncMasquerade(cluster, keep)
}
func (iptablesNAT) Remove() error { return iptables.RemoveMasquerade() }

// masqueradeLoop owns the masquerading of pod traffic: the no-masquerade set (written
// in every mode, it is also the cluster addresses pods may not tunnel to) and the nat
// chain (iptables masquerade; removed in the other modes). It is
// their only writer: first once at start-up, before the egress program is attached,
// then from Run as the Nodes change.
type masqueradeLoop struct {
	mode    masqueradeMode
	cluster netip.Prefix
	base    []netip.Prefix // noMasqueradeBase
	set     noMasqueradeSet
	nat     natChain
	nodes   *nodeWatch
	changed <-chan struct{}
	loops   *loops
	log     *slog.Logger
	// applied is the no-masquerade set last written (nil: none yet).
	applied []netip.Prefix
}

func newMasqueradeLoop(p nodePlan, set noMasqueradeSet, nodes *nodeWatch, l *loops, log *slog.Logger) *masqueradeLoop {
	return &masqueradeLoop{mode: p.Masquerade, cluster: p.ClusterCIDR, base: p.NoMasqueradeBase, set: set,
		nat: iptablesNAT{}, nodes: nodes, changed: nodes.subscribe(), loops: l, log: log}
}

// first writes the set from the Nodes the apiserver lists now, before anything is
// attached (the informer has not synced yet).
func (m *masqueradeLoop) first(ctx context.Context, cs kube.Client) error {
	list, err := cs.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("list nodes for the no-masquerade set: %w", err)
	}
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	return m.sync(nodes)
}

// Run follows the Nodes until ctx ends (loop "masquerade").
func (m *masqueradeLoop) Run(ctx context.Context) {
	m.nodes.follow(ctx, m.changed, "masquerade", m.loops, m.log, m.sync)
}

// sync keeps the masquerading of pod traffic in step with the Nodes. It writes only
// when the no-masquerade set changed since the last successful write, so the
// periodic resync costs no iptables runs or map updates.
func (m *masqueradeLoop) sync(nodes []*corev1.Node) error {
	keep := noMasquerade(m.base, nodes)
	if m.applied != nil && slices.Equal(keep, m.applied) {
		return nil
	}
	if err := m.apply(keep); err != nil {
		m.applied = nil
		return err
	}
	m.applied = keep
	return nil
}

// apply writes the no-masquerade set in every mode: myelin_from_pod drops a pod's
// IPIP, 6in4 and GRE packets to its addresses (bpf/lib/source.h), masquerade or not.
func (m *masqueradeLoop) apply(keep []netip.Prefix) error {
	if err := m.set.SetNoMasquerade(keep); err != nil {
		return fmt.Errorf("write the no-masquerade set: %w", err)
	}
	if m.mode == masqueradeIPTables {
		return m.nat.Sync(m.cluster, keep)
	}
	return m.nat.Remove() // masqueradeBPF, masqueradeOff
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
