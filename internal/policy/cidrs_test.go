package policy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One policy of 0.0.0.0/0 except 66,000 /31s (what a user with rights in one
// namespace can create) is over the CIDR budget: nothing of it reaches the
// ipcache, it is one problem naming it, the tenant's pod fails closed for
// egress, and the other namespace's pods compute as if it did not exist.
func TestComputeManyExceptsOverBudget(t *testing.T) {
	in := exceptsInput(66000, true)
	st := Compute(in, NewIdentities())
	if len(st.Problems) != 1 || st.Problems[0].Policy != "tenant/excepts" {
		t.Fatalf("problems %v, want one of tenant/excepts", st.Problems)
	}
	for _, want := range []string{"66001 distinct prefixes", "namespace tenant", "fail closed", "fewer, wider prefixes"} {
		if !strings.Contains(st.Problems[0].Message, want) {
			t.Errorf("problem %q does not say %q", st.Problems[0].Message, want)
		}
	}
	if len(st.IPCache) != len(in.Pods) {
		t.Errorf("ipcache holds %d prefixes, want only the %d pod /32s", len(st.IPCache), len(in.Pods))
	}
	for p := range st.IPCache {
		if p.Bits() != 32 {
			t.Errorf("ipcache holds policy prefix %s", p)
		}
	}
	tenant, _ := FindPod(in.Pods, "tenant/t")
	ep := st.Endpoints[tenant.IP]
	if ep == nil || ep.Flags != datapath.PolicyEgress|datapath.PolicyEgressIncomplete || len(ep.Entries) != 0 || len(ep.Problems) != 1 {
		t.Fatalf("tenant/t: %+v, want egress isolated, incomplete, no entries, one problem", ep)
	}
	other, _ := FindPod(in.Pods, "other/p0")
	if r := Trace(in, tenant, other, ProtoTCP, 80); r.Egress.Allowed {
		t.Errorf("trace tenant/t -> other/p0 = %+v: want egress denied, as Compute writes", r)
	}

	in.Policies = in.Policies[:1] // without the tenant's policy
	without := Compute(in, NewIdentities())
	if !reflect.DeepEqual(st.IPCache, without.IPCache) {
		t.Errorf("the over-budget policy changed the ipcache")
	}
	for addr, want := range without.Endpoints {
		if addr != tenant.IP && !reflect.DeepEqual(st.Endpoints[addr], want) {
			t.Errorf("%s: %+v, want %+v as without the tenant's policy", want.Pod, st.Endpoints[addr], want)
		}
	}
}

// A policy within the budget is enforced as written, excepts and all.
func TestComputeManyExceptsWithinBudget(t *testing.T) {
	in := exceptsInput(8000, true)
	st := Compute(in, NewIdentities())
	if len(st.Problems) != 0 {
		t.Fatalf("problems %v, want none", st.Problems)
	}
	if want := len(in.Pods) + 8001; len(st.IPCache) != want {
		t.Errorf("ipcache holds %d prefixes, want %d (pods, 0.0.0.0/0 and its 8,000 excepts)", len(st.IPCache), want)
	}
	all, except := st.IPCache[netip.MustParsePrefix("0.0.0.0/0")], st.IPCache[exceptPrefix(7999)]
	if all == 0 || except == 0 || all == except {
		t.Fatalf("0.0.0.0/0 has identity %d, an except %d: want two distinct", all, except)
	}
	tenant, _ := FindPod(in.Pods, "tenant/t")
	ep := st.Endpoints[tenant.IP]
	podIDs := map[uint32]bool{}
	for _, p := range in.Pods {
		podIDs[idOf(st, p)] = true
	}
	if ep.Flags != datapath.PolicyEgress || len(ep.Entries) != 1+len(podIDs) {
		t.Errorf("tenant/t: flags %b, %d entries: want egress isolated, allowing 0.0.0.0/0 and the %d pod identities",
			ep.Flags, len(ep.Entries), len(podIDs))
	}
	if _, ok := ep.Entries[egress(all)]; !ok {
		t.Errorf("tenant/t: no entry for 0.0.0.0/0's identity %d", all)
	}
	if _, ok := ep.Entries[egress(except)]; ok {
		t.Errorf("tenant/t: an entry for an except's identity %d", except)
	}
}

// An over-budget policy of namespace a leaves namespace b's ipcache entries (its
// pods' and its own ipBlock's) and allows as they are; namespace a's policies
// within its share are admitted in name order around it.
func TestComputeCIDRBudgetIsPerNamespace(t *testing.T) {
	in := Input{Node: "n1", Namespaces: map[string]map[string]string{"a": {"ns": "a"}, "b": {"ns": "b"}}, Pods: []Pod{
		{Namespace: "a", Name: "t", Node: "n1", Labels: map[string]string{"app": "t"}, IP: ip("10.244.0.1")},
		{Namespace: "b", Name: "web", Node: "n1", Labels: map[string]string{"app": "web"}, IP: ip("10.244.0.2")},
		{Namespace: "b", Name: "client", Node: "n2", Labels: map[string]string{"app": "client"}, IP: ip("10.244.1.2")},
	}}
	cidrPolicy := func(ns, name string, block networkingv1.IPBlock, egress bool) *networkingv1.NetworkPolicy {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if egress {
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &block}}}}
		} else {
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &block}}}}
		}
		return np
	}
	web := cidrPolicy("b", "web", networkingv1.IPBlock{CIDR: "203.0.113.0/24", Except: []string{"203.0.113.128/25"}}, false)
	web.Spec.PodSelector = *sel("app", "web")
	web.Spec.Ingress[0].From = append(web.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "client")})
	web.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{tcp(80)}
	in.Policies = []*networkingv1.NetworkPolicy{
		exceptsPolicy("a", "b-big", 66000),
		cidrPolicy("a", "a-small", networkingv1.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"192.0.2.0/28"}}, true),
		cidrPolicy("a", "c-small", networkingv1.IPBlock{CIDR: "198.51.100.0/24"}, false),
		web,
	}
	st := Compute(in, NewIdentities())

	if len(st.Problems) != 1 || st.Problems[0].Policy != "a/b-big" ||
		!strings.Contains(st.Problems[0].Message, "with the 2 of namespace a's policies before it") {
		t.Fatalf("problems %v, want one of a/b-big counting a-small's 2 prefixes", st.Problems)
	}
	for _, p := range []string{"192.0.2.0/24", "192.0.2.0/28", "198.51.100.0/24", "203.0.113.0/24", "203.0.113.128/25"} {
		if _, ok := st.IPCache[netip.MustParsePrefix(p)]; !ok {
			t.Errorf("ipcache lacks %s", p)
		}
	}
	if want := 5 + len(in.Pods); len(st.IPCache) != want {
		t.Errorf("ipcache holds %d prefixes, want %d", len(st.IPCache), want)
	}
	a := st.Endpoints[ip("10.244.0.1")]
	wantFlags := datapath.PolicyIngress | datapath.PolicyEgress | datapath.PolicyEgressIncomplete
	if a.Flags != wantFlags || a.Entries[egress(st.IPCache[netip.MustParsePrefix("192.0.2.0/24")])] == nil ||
		a.Entries[ingress(st.IPCache[netip.MustParsePrefix("198.51.100.0/24")])] == nil {
		t.Errorf("a/t: flags %b entries %v: want a-small's and c-small's allows, egress incomplete", a.Flags, a.Entries)
	}

	in.Policies = in.Policies[1:] // without a/b-big
	without := Compute(in, NewIdentities())
	if !reflect.DeepEqual(st.IPCache, without.IPCache) {
		t.Errorf("a/b-big changed the ipcache:\n%v\n%v", st.IPCache, without.IPCache)
	}
	b := st.Endpoints[ip("10.244.0.2")]
	if !reflect.DeepEqual(b, without.Endpoints[ip("10.244.0.2")]) {
		t.Errorf("b/web: %+v, want %+v as without a/b-big", b, without.Endpoints[ip("10.244.0.2")])
	}
	wantB := map[Key][]datapath.PolicyPort{
		ingress(st.IPCache[netip.MustParsePrefix("203.0.113.0/24")]): tcp80,
		ingress(st.IPCache[netip.MustParsePrefix("10.244.1.2/32")]):  tcp80,
	}
	if b.Flags != datapath.PolicyIngress || !reflect.DeepEqual(b.Entries, wantB) {
		t.Errorf("b/web: flags %b entries %v, want ingress isolated with %v", b.Flags, b.Entries, wantB)
	}
}

func TestCIDRShare(t *testing.T) {
	for _, c := range []struct {
		demands       []int
		budget, share int
	}{
		{nil, 100, 100},
		{[]int{10, 20}, 100, 100},         // everything fits
		{[]int{1000}, 100, 100},           // one namespace: the whole budget
		{[]int{1000, 10, 20}, 100, 70},    // the small ones whole, the rest to the big one
		{[]int{1000, 10, 60}, 100, 45},    // 60 > (100-10)/2: both big ones get 45
		{[]int{1000, 1000, 1000}, 99, 33}, // equal shares
		{[]int{34, 33, 33}, 100, 100},     // exactly the budget
	} {
		if got := cidrShare(c.demands, c.budget); got != c.share {
			t.Errorf("cidrShare(%v, %d) = %d, want %d", c.demands, c.budget, got, c.share)
		}
	}
}
