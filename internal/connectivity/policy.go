package connectivity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const policyName = "server-b-allowed-clients"

// serverPolicy lets only pods labelled access=allowed reach server-b, on its port.
func serverPolicy() *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(serverPort)
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName, Labels: map[string]string{labelTest: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelPod: podServerB}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"access": "allowed"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
}

func applyPolicy(ctx context.Context, o Options, ns string) error {
	if _, err := o.Client.NetworkingV1().NetworkPolicies(ns).Create(ctx, serverPolicy(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create networkpolicy %s/%s: %w", ns, policyName, err)
	}
	return nil
}

func removePolicy(ctx context.Context, o Options, ns string) error {
	if err := o.Client.NetworkingV1().NetworkPolicies(ns).Delete(ctx, policyName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete networkpolicy %s/%s: %w", ns, policyName, err)
	}
	return nil
}
