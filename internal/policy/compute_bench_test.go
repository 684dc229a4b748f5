package policy

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// scaleInput is 1,000 policies over 200 pods on one node (and 1,800 on
// others), in 20 namespaces: each policy selects one app's pods and allows
// two other apps and a CIDR on three ports (the scale case).
func scaleInput() Input {
	in := Input{Node: "n1", Namespaces: map[string]map[string]string{}}
	for i := 0; i < 2000; i++ {
		ns := fmt.Sprintf("ns%d", i%20)
		in.Namespaces[ns] = map[string]string{"team": fmt.Sprintf("t%d", i%5)}
		node := fmt.Sprintf("n%d", 1+i%10)
		in.Pods = append(in.Pods, Pod{Namespace: ns, Name: fmt.Sprintf("p%d", i), Node: node,
			Labels: map[string]string{"app": fmt.Sprintf("app%d", i%50)},
			IP:     netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i % 250)})})
	}
	tcp := corev1.ProtocolTCP
	for i := 0; i < 1000; i++ {
		ports := []networkingv1.NetworkPolicyPort{}
		for _, p := range []int32{80, 443, int32(8000 + i%100)} {
			v := intstr.FromInt32(p)
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &v})
		}
		in.Policies = append(in.Policies, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%20), Name: fmt.Sprintf("np%d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", i%50)}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ports, From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", (i+1)%50)}}},
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i%5)}},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", (i+2)%50)}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("172.%d.0.0/16", 16+i%16), Except: []string{fmt.Sprintf("172.%d.1.0/24", 16+i%16)}}},
				}}},
			}})
	}
	return in
}

// The scale case computes in well under a second (a bench, not a timed
// test: run with -bench; this test only checks the state is sane).
func TestComputeScaleInput(t *testing.T) {
	start := time.Now()
	st := Compute(scaleInput(), NewIdentities())
	if len(st.Endpoints) != 200 {
		t.Fatalf("%d local endpoints, want 200", len(st.Endpoints))
	}
	isolated := 0
	for _, ep := range st.Endpoints {
		if ep.Flags != 0 {
			isolated++
		}
	}
	if isolated != 200 {
		t.Errorf("%d isolated, want all 200", isolated)
	}
	t.Logf("1,000 policies, 200 local pods of 2,000: %d identities, %d ipcache prefixes, computed in %s",
		st.Identities, len(st.IPCache), time.Since(start))
}

func BenchmarkCompute1000Policies200Pods(b *testing.B) {
	in := scaleInput()
	ids := NewIdentities()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Compute(in, ids)
	}
}

// expressionPeersInput is scaleInput with 1,000 more pods of distinct labels
// elsewhere (~1,100 identities) and a tenant's namespace with pods on the node
// and one policy of 2,000 peers, each a namespaceSelector of matchExpressions
// (20 values that match nothing): a selector the API takes at any count, which
// a computation matches against every identity for every rule.
func expressionPeersInput(localPods int) Input {
	in := scaleInput()
	for i := 0; i < 1000; i++ {
		in.Pods = append(in.Pods, Pod{Namespace: "ns0", Name: fmt.Sprintf("u%d", i), Node: "n2",
			Labels: map[string]string{"app": fmt.Sprintf("unique%d", i)},
			IP:     netip.AddrFrom4([4]byte{10, 245, byte(i / 250), byte(i % 250)})})
	}
	in.Namespaces["tenant"] = map[string]string{"team": "tenant"}
	for i := 0; i < localPods; i++ {
		in.Pods = append(in.Pods, Pod{Namespace: "tenant", Name: fmt.Sprintf("t%d", i), Node: "n1",
			Labels: map[string]string{"app": "t"}, IP: netip.AddrFrom4([4]byte{10, 246, 0, byte(i + 1)})})
	}
	var peers []networkingv1.NetworkPolicyPeer
	for i := 0; i < 2000; i++ {
		values := make([]string, 20)
		for v := range values {
			values[v] = fmt.Sprintf("none-%d-%d", i, v)
		}
		peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: values}}}})
	}
	in.Policies = append(in.Policies, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "many-peers"},
		Spec:       networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers}}}})
	return in
}

// go test -run '^$' -bench ComputeExpressionPeers -benchtime 1x ./internal/policy/
func BenchmarkComputeExpressionPeers(b *testing.B) {
	for _, local := range []int{1, 3} {
		b.Run(fmt.Sprintf("local-%d", local), func(b *testing.B) {
			in := expressionPeersInput(local)
			ids := NewIdentities()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				Compute(in, ids)
			}
		})
	}
}
