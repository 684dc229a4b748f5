package policy

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// traceInput is scaleInput (1,000 ingress policies, 2,000 pods in 20 namespaces)
// with an egress policy per namespace: every pod of it may reach 10.244.0.0/16 but
// one /24 on TCP 80, and one app of any namespace on any port; and an ingress policy per namespace
// allowing every namespace on TCP 443. Its answers are allowed and denied, by
// ipBlocks, excepts, pod and namespace selectors.
func traceInput() Input {
	in := scaleInput()
	tcp := corev1.ProtocolTCP
	http, https := intstr.FromInt32(80), intstr.FromInt32(443)
	for i := range 20 {
		ns := fmt.Sprintf("ns%d", i)
		in.Policies = append(in.Policies, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "egress"},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{fmt.Sprintf("10.244.%d.0/24", i%8)}}}},
						Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}}},
					{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", (i+3)%50)}}}}},
				},
			}}, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "https"},
			Spec: networkingv1.NetworkPolicySpec{
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &https}}}},
			}})
	}
	return in
}

// A Tracer asked many questions answers each as Trace, which compiles the Input for
// the one question, does: what it keeps (the compiled ipBlocks, the policies by
// namespace) depends on the Input only. Over the CIDR budget too.
func TestTracerReusedAnswersAsFresh(t *testing.T) {
	type question struct {
		proto uint8
		port  uint16
	}
	check := func(name string, in Input, pods []Pod, qs []question) {
		t.Helper()
		tr := NewTracer(in)
		allowed, denied := 0, 0
		for _, from := range pods {
			for _, to := range pods {
				for _, q := range qs {
					got, want := tr.Trace(from, to, q.proto, q.port), Trace(in, from, to, q.proto, q.port)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: %s -> %s %d/%d: reused %+v, fresh %+v", name, from.Ref(), to.Ref(), q.proto, q.port, got, want)
					}
					if got.Allowed() {
						allowed++
					} else {
						denied++
					}
				}
			}
		}
		if allowed == 0 || denied == 0 {
			t.Errorf("%s: %d allowed, %d denied: want both asked", name, allowed, denied)
		}
	}
	in := traceInput()
	var pods []Pod
	for i := 0; i < len(in.Pods); i += 211 { // 10 pods, of 10 namespaces and 3 /24s
		pods = append(pods, in.Pods[i])
	}
	pods = append(pods, in.Pods[3], in.Pods[6]) // ns3's egress allows app6 (pod 6) on every port
	check("1,000 policies", in, pods, []question{{ProtoTCP, 80}, {ProtoTCP, 443}, {ProtoUDP, 53}})

	in = exceptsInput(66000, true)
	tenant, _ := FindPod(in.Pods, "tenant/t")
	check("over the CIDR budget", in, []Pod{tenant, in.Pods[0], in.Pods[1]}, []question{{ProtoTCP, 80}})
}

// BenchmarkTrace1000Policies is the flow reader's policy verdict of a new
// connection whose answer is not cached, at 1,000 policies: fresh is Trace (every
// policy's ipBlocks compiled per question), reused a Tracer of the policy view.
func BenchmarkTrace1000Policies(b *testing.B) {
	in := traceInput()
	from, to := in.Pods[3], in.Pods[6]
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			Trace(in, from, to, ProtoTCP, 80)
		}
	})
	b.Run("reused", func(b *testing.B) {
		tr := NewTracer(in)
		for b.Loop() {
			tr.Trace(from, to, ProtoTCP, 80)
		}
	})
}
