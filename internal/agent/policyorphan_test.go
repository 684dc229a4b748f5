package agent

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// A pod force-deleted from the API (kubectl delete --force) runs on until the
// kubelet kills it; its endpoint keeps the isolation and the allows it had until
// CNI DEL removes the endpoint, also across an agent restart (nothing in memory).
func TestPolicyKeepsForceDeletedPodsIsolated(t *testing.T) {
	pod := func(name, ip, app string) any {
		c, _ := slimPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}})
		return c
	}
	db, web := pod("db", "10.244.0.7", "db"), pod("web", "10.244.0.8", "web")
	dbIP := netip.MustParseAddr("10.244.0.7")
	// db accepts web only, and sends nothing.
	onlyWeb := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}}}
	ids := policy.NewIdentities()
	m := newFakePolicyMaps()
	apply := func(objs []any, eps []api.Endpoint) policy.State {
		t.Helper()
		in := policy.Input{Node: "n1", Namespaces: map[string]map[string]string{"shop": nil},
			Pods: cachedPolicyPods(objs, "n1", endpointIPs(eps)), Policies: []*networkingv1.NetworkPolicy{onlyWeb}}
		st := policy.Compute(in, ids)
		if _, err := applyPolicy(m, &purgeJournal{}, st, orphanEndpoints("n1", eps, in.Pods), nil); err != nil {
			t.Fatal(err)
		}
		return st
	}
	endpoint := func(name, ip string) api.Endpoint {
		return api.Endpoint{PodRef: api.PodRef{Namespace: "shop", Pod: name}, IP: ip}
	}
	both := []api.Endpoint{endpoint("db", "10.244.0.7"), endpoint("web", "10.244.0.8")}

	apply([]any{db, web}, both)
	flags, entries := m.flags[dbIP], dbEntries(m, dbIP)
	if flags != datapath.PolicyIngress|datapath.PolicyEgress || len(entries) == 0 {
		t.Fatalf("db with its Pod: flags %v, entries %v; want isolated both ways with web's allow", flags, entries)
	}

	st := apply([]any{web}, both) // db's Pod force-deleted; its sandbox and endpoint remain
	if m.flags[dbIP] != flags || !maps.EqualFunc(dbEntries(m, dbIP), entries, slices.Equal) {
		t.Errorf("db's Pod gone, its endpoint there: flags %v, entries %v; want them kept (%v, %v)",
			m.flags[dbIP], dbEntries(m, dbIP), flags, entries)
	}
	if ep := st.Endpoints[dbIP]; ep == nil || ep.Pod != "shop/db" || !slices.Contains(ep.Problems, orphanProblem) {
		t.Errorf("db in the computed state: %+v, want it kept with a problem saying why", ep)
	}
	apply([]any{web}, both) // the same again (a resync, or a restarted agent reading the maps)
	if m.flags[dbIP] != flags || len(dbEntries(m, dbIP)) == 0 {
		t.Errorf("the next apply dropped db's isolation: flags %v, entries %v", m.flags[dbIP], dbEntries(m, dbIP))
	}

	apply([]any{web}, both[1:]) // CNI DEL removed db's endpoint
	if m.flags[dbIP] != 0 || len(dbEntries(m, dbIP)) != 0 {
		t.Errorf("after CNI DEL: flags %v, entries %v; want none", m.flags[dbIP], dbEntries(m, dbIP))
	}
}

// dbEntries are m's entries of endpoint ip.
func dbEntries(m *fakePolicyMaps, ip netip.Addr) map[datapath.PolicyKey][]datapath.PolicyPort {
	out := map[datapath.PolicyKey][]datapath.PolicyPort{}
	for k, v := range m.entries {
		if k.Endpoint == ip {
			out[k] = v
		}
	}
	return out
}
