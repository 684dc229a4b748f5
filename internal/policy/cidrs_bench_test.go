package policy

import (
	"fmt"
	"net/netip"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// exceptsInput is 200 pods of namespace "other" on this node (n1), isolated by a
// label policy, and one policy of namespace "tenant" allowing egress to
// 0.0.0.0/0 except n distinct /31s (the shape a user with rights in one namespace
// can create: 66,000 excepts fit in the apiserver's object size). The tenant's pod
// is on n1 when tenantLocal, else on n2 (then only the ipcache and the
// identities depend on the excepts, as on every node without the tenant's pods).
func exceptsInput(n int, tenantLocal bool) Input {
	in := Input{Node: "n1", Namespaces: map[string]map[string]string{
		"other": {"ns": "other"}, "tenant": {"ns": "tenant"}}}
	for i := 0; i < 200; i++ {
		in.Pods = append(in.Pods, Pod{Namespace: "other", Name: fmt.Sprintf("p%d", i), Node: "n1",
			Labels: map[string]string{"app": fmt.Sprintf("app%d", i%10)},
			IP:     netip.AddrFrom4([4]byte{10, 244, 0, byte(i + 1)})})
	}
	tenantNode := "n2"
	if tenantLocal {
		tenantNode = "n1"
	}
	in.Pods = append(in.Pods, Pod{Namespace: "tenant", Name: "t", Node: tenantNode,
		Labels: map[string]string{"app": "t"}, IP: netip.AddrFrom4([4]byte{10, 244, 1, 1})})
	in.Policies = append(in.Policies, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "same-app"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app1"}}}}}}}})
	in.Policies = append(in.Policies, exceptsPolicy("tenant", "excepts", n))
	return in
}

// exceptsPolicy is namespace/name, selecting every pod of its namespace and
// allowing egress to 0.0.0.0/0 except n distinct /31s of 100.64.0.0/10 (none of
// them holds a pod).
func exceptsPolicy(namespace, name string, n int) *networkingv1.NetworkPolicy {
	excepts := make([]string, n)
	for i := range excepts {
		excepts[i] = exceptPrefix(i).String()
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: excepts}}}}}}}
}

// exceptPrefix is the i-th /31 of 100.64.0.0/10.
func exceptPrefix(i int) netip.Prefix {
	a := uint32(100)<<24 | uint32(64)<<16 + uint32(2*i)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), 31)
}

// One computation with a policy of many excepts (docs/policy.md, "Cost on paper"):
// go test -run '^$' -bench ComputeManyExcepts -benchtime 1x ./internal/policy/
func BenchmarkComputeManyExcepts(b *testing.B) {
	for _, c := range []struct {
		n     int
		local bool
	}{{4000, false}, {16000, false}, {66000, false}, {8000, true}} {
		where := "remote"
		if c.local {
			where = "local"
		}
		b.Run(fmt.Sprintf("excepts=%d/tenant=%s", c.n, where), func(b *testing.B) {
			in := exceptsInput(c.n, c.local)
			ids := NewIdentities()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Compute(in, ids)
			}
		})
	}
}
