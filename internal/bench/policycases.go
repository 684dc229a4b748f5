package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// benchPolicies is how many NetworkPolicies select the policy pair.
const benchPolicies = 100

// policyLabel marks the pods of one policy pair; the policies select it, so
// no other bench pod is isolated.
const policyLabel = "myelin-bench-policy"

// policyPair is a podPair whose client and server are selected by
// benchPolicies NetworkPolicies (ingress and egress, rules on several ports
// and CIDRs; one allows the pair to each other on every port, which netperf's
// control and data connections need), so every packet takes the isolated
// path: the policy conntrack lookup on both ends.
type policyPair struct{ podPair }

func (p policyPair) setup(ctx context.Context, c *Cluster, env string) (Endpoints, error) {
	eps, err := p.podPair.setup(ctx, c, env)
	if err != nil {
		return eps, err
	}
	base := "bench-" + strings.ReplaceAll(env, "/", "-")
	for _, name := range []string{base + "-client", base + "-server"} {
		pod, err := c.kube.cs.CoreV1().Pods(benchNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return eps, fmt.Errorf("label pod %s: %w", name, err)
		}
		pod.Labels[policyLabel] = base
		if _, err := c.kube.cs.CoreV1().Pods(benchNamespace).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			return eps, fmt.Errorf("label pod %s: %w", name, err)
		}
	}
	for i := 0; i < benchPolicies; i++ {
		np := benchPolicy(base, i)
		if _, err := c.kube.cs.NetworkingV1().NetworkPolicies(benchNamespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return eps, fmt.Errorf("create NetworkPolicy %s: %w", np.Name, err)
		}
	}
	return eps, waitIsolated(ctx, map[string]string{p.client: base + "-client", p.server: base + "-server"})
}

// benchPolicy is the i-th policy of the pair base: policy 0 allows the pair
// everything to each other, the others a few ports from and to the pair and
// from and to CIDRs outside the cluster.
func benchPolicy(base string, i int) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{policyLabel: base}}
	pair := []networkingv1.NetworkPolicyPeer{{PodSelector: &sel}}
	var ports []networkingv1.NetworkPolicyPort
	if i > 0 {
		tcp := corev1.ProtocolTCP
		for _, n := range []int32{int32(1000 + i), int32(2000 + i), 443} {
			v := intstr.FromInt32(n)
			ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &v})
		}
		pair = append(pair, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{
			CIDR: fmt.Sprintf("172.%d.%d.0/24", 16+i%16, i), Except: []string{fmt.Sprintf("172.%d.%d.128/25", 16+i%16, i)}}})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", base, i), Namespace: benchNamespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: pair, Ports: ports}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: pair, Ports: ports}},
		},
	}
}

// waitIsolated waits until the agents enforce both directions on the
// pods (node -> pod name), so nothing is measured before the policies apply.
func waitIsolated(ctx context.Context, pods map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	state := "no answer"
	for {
		isolated := 0
		for node, name := range pods {
			st, err := api.NewClient(api.NodeSocket(node)).Policy(ctx)
			if err != nil {
				state = err.Error()
				continue
			}
			for _, ep := range st.Endpoints {
				if ep.Pod == benchNamespace+"/"+name && ep.Ingress == "on" && ep.Egress == "on" && ep.Entries > 0 {
					isolated++
				}
			}
		}
		if isolated == len(pods) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %v are not isolated both ways after a minute (%s); see myelin endpoints", pods, state)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// policyCases adds bpf-policy-same-node and bpf-policy-cross-node: pods of
// nodes a and b as bpf-same-node and bpf-cross-node have them, with
// benchPolicies policies selecting both, compared to those in the same run
// (TCP_RR and TCP_CRR, both placements).
func (s *stageBuilder) policyCases(a, b int) {
	for _, e := range []struct {
		name, base string
		server     int
	}{{"bpf-policy-same-node", "bpf-same-node", a}, {"bpf-policy-cross-node", "bpf-cross-node", b}} {
		pair := podPair{client: labplan.NodeName(a), server: labplan.NodeName(e.server), hostRouting: hostRoutingBPF}
		env := s.env(e.name, policyPair{pair})
		base := s.env(e.base, pair) // names the baseline, built by pods()
		for _, c := range Matrix(env, GroupMyelin, base, []Workload{TCPRR(), TCPCRR()}, Placements()) {
			c.Stage = s.stage
			s.cases = append(s.cases, c)
		}
	}
}
