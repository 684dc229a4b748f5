package policy

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/datapath"
)

// A tenant whose policy admits every pod of the cluster (namespaceSelector: {}) on
// 40 pods of the node asks for more entries than the node's policy map can share:
// its pods past its share fail closed, and another tenant's pods keep every entry
// they had without it (before, the map filled and their entries went unwritten).
func TestComputeEntriesStayWithinTheNamespacesShare(t *testing.T) {
	var pods []Pod
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}) }
	for i := range 1000 { // 1,000 label sets elsewhere
		pods = append(pods, Pod{Namespace: "far", Name: fmt.Sprintf("f%d", i), Labels: map[string]string{"i": fmt.Sprint(i)},
			IP: addr(1000 + i), Node: "n2"})
	}
	for i := range 40 {
		pods = append(pods, Pod{Namespace: "t", Name: fmt.Sprintf("p%02d", i), Labels: map[string]string{"app": "t", "i": fmt.Sprint(i)},
			IP: addr(i), Node: "n1"})
	}
	victims := []Pod{
		{Namespace: "v", Name: "web", Labels: map[string]string{"app": "web"}, IP: addr(100), Node: "n1"},
		{Namespace: "v", Name: "db", Labels: map[string]string{"app": "db"}, IP: addr(101), Node: "n1"},
	}
	pods = append(pods, victims...)
	// Of t too, after the others by name: one no policy selects, one denied all.
	pods = append(pods, Pod{Namespace: "t", Name: "zz-free", Labels: map[string]string{"app": "free"}, IP: addr(200), Node: "n1"},
		Pod{Namespace: "t", Name: "zz-shut", Labels: map[string]string{"app": "shut"}, IP: addr(201), Node: "n1"})
	namespaces := map[string]map[string]string{"far": {"ns": "far"}, "t": {"ns": "t"}, "v": {"ns": "v"}}
	victimPolicy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "v", Name: "db"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "web")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}}}
	shut := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "shut"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "shut")}}
	flood := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "all"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "t"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}}}}

	alone := Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy}}, NewIdentities())
	ids := NewIdentities()
	Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy}}, ids) // same numbers
	st := Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy, flood, shut}}, ids)

	db := victims[1].IP
	if got, want := st.Endpoints[db], alone.Endpoints[db]; !reflect.DeepEqual(got.Entries, want.Entries) || got.Flags != want.Flags {
		t.Errorf("v/db beside the flood: flags %v, %d entries; want flags %v and its %d entries as without it",
			got.Flags, len(got.Entries), want.Flags, len(want.Entries))
	}
	for ip, want := range map[netip.Addr]datapath.PolicyFlags{addr(200): 0, addr(201): datapath.PolicyIngress} {
		if ep := st.Endpoints[ip]; ep.Flags != want || len(ep.Problems) > 0 {
			t.Errorf("%s (asks for no entry) in the overflowing namespace: flags %v, problems %q; want flags %v and none",
				ep.Pod, ep.Flags, ep.Problems, want)
		}
	}
	total, admitted, refused := 0, 0, 0
	for _, ep := range st.Endpoints {
		total += len(ep.Entries)
		if !strings.HasPrefix(ep.Pod, "t/p") {
			continue
		}
		switch {
		case len(ep.Entries) > 0 && ep.Flags&datapath.PolicyIngressIncomplete == 0:
			admitted++
		case len(ep.Entries) == 0 && ep.Flags&datapath.PolicyIngressIncomplete != 0 && len(ep.Problems) > 0 &&
			strings.Contains(ep.Problems[len(ep.Problems)-1], "namespace t past its share") &&
			!strings.Contains(ep.Problems[len(ep.Problems)-1], "namespaces"):
			refused++
		default:
			t.Errorf("%s: flags %v, %d entries, problems %q: neither admitted nor refused", ep.Pod, ep.Flags, len(ep.Entries), ep.Problems)
		}
	}
	unbuilt := 0 // pods whose entries were not even built: the computation stays bounded
	for _, ep := range st.Endpoints {
		if ep.overflow {
			unbuilt++
		}
	}
	if unbuilt == 0 {
		t.Error("every pod of t had its entries built: the computation is not bounded by the budget")
	}
	if total > EntryBudget || admitted == 0 || refused == 0 {
		t.Errorf("%d entries in all (budget %d), %d of t's pods admitted, %d refused; want within the budget, some of each",
			total, EntryBudget, admitted, refused)
	}
	problems := 0
	for _, p := range st.Problems {
		if p.Policy == "t/all" && strings.Contains(p.Message, "fails closed") {
			problems++
		}
	}
	if problems != refused {
		t.Errorf("%d problems name t/all, want one per refused pod (%d)", problems, refused)
	}
}

// A pod that asks for more than the whole budget alone is refused without costing
// the pods after it: a small one of its namespace is admitted.
func TestComputeOversizedPodRefusedAlone(t *testing.T) {
	var pods []Pod
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	for i := range EntryBudget + 100 {
		pods = append(pods, Pod{Namespace: "far", Name: fmt.Sprintf("f%d", i), Labels: map[string]string{"i": fmt.Sprint(i)},
			IP: addr(100000 + i), Node: "n2"})
	}
	big := Pod{Namespace: "t", Name: "a-big", Labels: map[string]string{"app": "big"}, IP: addr(1), Node: "n1"}
	small := Pod{Namespace: "t", Name: "b-small", Labels: map[string]string{"app": "small"}, IP: addr(2), Node: "n1"}
	pods = append(pods, big, small)
	all := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "all"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "big"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}}}}
	one := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "one"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "small"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "big")}}}}}}
	st := Compute(Input{Node: "n1", Pods: pods, Namespaces: map[string]map[string]string{"far": {}, "t": {}},
		Policies: []*networkingv1.NetworkPolicy{all, one}}, NewIdentities())
	if ep := st.Endpoints[big.IP]; len(ep.Entries) != 0 || ep.Flags&datapath.PolicyIngressIncomplete == 0 {
		t.Errorf("t/a-big: flags %v, %d entries; want refused", ep.Flags, len(ep.Entries))
	}
	if ep := st.Endpoints[small.IP]; len(ep.Entries) != 1 || ep.Flags&datapath.PolicyIngressIncomplete != 0 {
		t.Errorf("t/b-small after the refused t/a-big: flags %v, %d entries, problems %q; want its one entry", ep.Flags, len(ep.Entries), ep.Problems)
	}
}
