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
	namespaces := map[string]map[string]string{"far": {"ns": "far"}, "t": {"ns": "t"}, "v": {"ns": "v"}}
	victimPolicy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "v", Name: "db"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "db"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "web")}}, Ports: []networkingv1.NetworkPolicyPort{tcp(80)}}}}}
	flood := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "all"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel("app", "t"), Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}}}}

	alone := Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy}}, NewIdentities())
	ids := NewIdentities()
	Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy}}, ids) // same numbers
	st := Compute(Input{Node: "n1", Pods: pods, Namespaces: namespaces, Policies: []*networkingv1.NetworkPolicy{victimPolicy, flood}}, ids)

	db := victims[1].IP
	if got, want := st.Endpoints[db], alone.Endpoints[db]; !reflect.DeepEqual(got.Entries, want.Entries) || got.Flags != want.Flags {
		t.Errorf("v/db beside the flood: flags %v, %d entries; want flags %v and its %d entries as without it",
			got.Flags, len(got.Entries), want.Flags, len(want.Entries))
	}
	total, admitted, refused := 0, 0, 0
	for _, ep := range st.Endpoints {
		total += len(ep.Entries)
		if !strings.HasPrefix(ep.Pod, "t/") {
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
