package conformance

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// noSCTPServer is why the SCTP cases do not run in the lab.
const noSCTPServer = "the lab's pods run host programs and none serves SCTP " +
	"(upstream tags these [Feature:SCTPConnectivity]); SCTP port matching is covered by the BPF tables"

// Cases are the upstream truth tables, in upstream's order: 42 TCP, 3 UDP, 3 SCTP.
func Cases() []Case {
	cases := append(tcpCases(), tcpCasesB()...)
	cases = append(append(cases, tcpCasesC()...), tcpCasesD()...)
	return append(cases, udpSCTPCases()...)
}

// tcpCases are upstream's first TCP cases, up to "a pod in a different namespace".
func tcpCases() []Case {
	return []Case{
		{Name: "should support a 'default-deny-ingress' policy", Steps: []Step{step(
			actions(create(policy("x", "deny-ingress", all, noRules(), nil))),
			tcp(80, expectPeer(anyPod, nsX, false)))}},
		{Name: "should support a 'default-deny-all' policy", Steps: []Step{step(
			actions(create(policy("x", "deny-all", all, noRules(), noEgress()))),
			tcp(80, expectPeer(anyPod, nsX, false), expectPeer(nsX, anyPod, false)))}},
		{Name: "should enforce policy to allow traffic from pods within server namespace based on PodSelector", Steps: []Step{step(
			actions(create(policy("x", "x-a-allows-x-b", podA, []ingressRule{from(pods(matchLabels("pod", "b")))}, nil))),
			tcp(80, allIngress(xa, false), expect(xb, xa, true)))}},
		{Name: "should enforce policy to allow ingress traffic for a target", Steps: []Step{step(
			actions(create(policy("x", "deny-all", all, noRules(), nil)),
				create(policy("x", "allow-all-to-a", podA, []ingressRule{from(nsAndPods(all, all))}, nil))),
			tcp(80, allIngress(xa, true), allIngress(xb, false), allIngress(xc, false)))}},
		{Name: "should enforce policy to allow ingress traffic from pods in all namespaces", Steps: []Step{step(
			actions(create(policy("x", "allow-from-another-ns", podA, []ingressRule{from(nss(all))}, nil))),
			tcp(80))}},
		{Name: "should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector", Steps: []Step{step(
			actions(create(policy("x", "allow-client-a-via-ns-selector", podA, []ingressRule{from(nss(nsName("y")))}, nil))),
			tcp(80, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)))}},
		{Name: "should enforce policy based on PodSelector with MatchExpressions", Steps: []Step{step(
			actions(create(policy("x", "x-a-allows-x-b", podA, []ingressRule{from(pods(expr("pod", metav1.LabelSelectorOpIn, "b")))}, nil))),
			tcp(80, allIngress(xa, false), expect(xb, xa, true)))}},
		{Name: "should enforce policy based on NamespaceSelector with MatchExpressions", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-match-selector", podA, []ingressRule{from(nss(expr(nsLabel, metav1.LabelSelectorOpIn, "y")))}, nil))),
			tcp(80, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)))}},
		{Name: "should enforce policy based on PodSelector or NamespaceSelector", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-match-selector", podA, []ingressRule{
				from(nss(expr(nsLabel, metav1.LabelSelectorOpNotIn, "x")), pods(matchLabels("pod", "b")))}, nil))),
			tcp(80, expect(xa, xa, false), expect(xc, xa, false)))}},
		{Name: "should enforce policy based on PodSelector and NamespaceSelector", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-podselector-and-nsselector", podA, []ingressRule{
				from(nsAndPods(expr(nsLabel, metav1.LabelSelectorOpNotIn, "x"), matchLabels("pod", "b")))}, nil))),
			tcp(80, allIngress(xa, false), expect(yb, xa, true), expect(PodRef{"z", "b"}, xa, true)))}},
		{Name: "should enforce policy based on Multiple PodSelectors and NamespaceSelectors", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-z-pod-b-c", podA, []ingressRule{
				from(nsAndPods(expr(nsLabel, metav1.LabelSelectorOpNotIn, "x"), expr("pod", metav1.LabelSelectorOpIn, "b", "c")))}, nil))),
			tcp(80, expectPeer(nsX, Peer(xa), false), expect(ya, xa, false), expect(PodRef{"z", "a"}, xa, false)))}},
		{Name: "should enforce policy based on any PodSelectors", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-x-pod-b-c", podA, []ingressRule{
				from(pods(matchLabels("pod", "b")), pods(matchLabels("pod", "c")))}, nil))),
			tcp(80, allIngress(xa, false), expect(xb, xa, true), expect(xc, xa, true)))}},
		{Name: "should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-pod-a-via-namespace-pod-selector", podA, []ingressRule{
				from(nsAndPods(nsName("y"), matchLabels("pod", "a")))}, nil))),
			tcp(80, allIngress(xa, false), expect(ya, xa, true)))}},
	}
}

// tcpCasesB are upstream's TCP cases from "based on Ports" to "Ingress, Egress specified together".
func tcpCasesB() []Case {
	return []Case{
		{Name: "should enforce policy based on Ports", Steps: []Step{step(
			actions(create(policy("x", "allow-client-a-via-ns-selector", podA, []ingressRule{
				withPorts(from(nss(nsName("y"))), portOf(corev1.ProtocolTCP, 81))}, nil))),
			tcp(81, expectPeer(nsX, Peer(xa), false), expectPeer(nsY, Peer(xa), true), expectPeer(nsZ, Peer(xa), false)))}},
		stackedPolicies(),
		{Name: "should support allow-all policy", Steps: []Step{step(
			actions(create(policy("x", "allow-all", all, []ingressRule{{}}, nil))),
			tcp(80), tcp(81))}},
		{Name: "should allow ingress access on one named port", Steps: []Step{step(
			actions(create(policy("x", "allow-all", all, []ingressRule{withPorts(ingressRule{}, named("serve-81-tcp"))}, nil))),
			tcp(81), tcp(80, expectPeer(anyPod, nsX, false)))}},
		{Name: "should allow ingress access from namespace on one named port", Steps: []Step{step(
			actions(create(policy("x", "allow-client-a-via-ns-selector-80", podA, []ingressRule{
				withPorts(from(nss(nsName("y"))), namedTCP("serve-80-tcp"))}, nil))),
			tcp(80, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)),
			tcp(81, allIngress(xa, false)))}},
		{Name: "should allow egress access on one named port", Steps: []Step{step(
			actions(create(policy("x", "allow-egress", all, nil, []egressRule{egressPorts(egressRule{}, named("serve-80-tcp"))}))),
			tcp(80), tcp(81, expectPeer(nsX, anyPod, false)))}},
		updatedPolicy(),
		{Name: "should allow ingress access from updated namespace", Steps: []Step{
			step(actions(create(policy("x", "allow-client-a-via-ns-selector", podA, []ingressRule{from(nss(matchLabels("ns2", "updated")))}, nil))),
				tcp(80, allIngress(xa, false))),
			step(actions(Action{LabelNamespace: "y", Labels: map[string]string{"ns2": "updated"}}),
				tcp(80, allIngress(xa, false), expectPeer(nsY, anyPod, true))),
		}},
		{Name: "should allow ingress access from updated pod", Steps: []Step{
			step(actions(create(policy("x", "allow-client-a-via-pod-selector", podA, []ingressRule{
				from(pods(matchLabels("pod", "b", "pod2", "updated")))}, nil))),
				tcp(80, allIngress(xa, false))),
			step(actions(Action{LabelPod: &xb, Labels: map[string]string{"pod": "b", "pod2": "updated"}}),
				tcp(80, allIngress(xa, false), expect(xb, xa, true))),
		}},
		{Name: "should deny ingress from pods on other namespaces", Steps: []Step{step(
			actions(create(policy("x", "deny-empty-policy", all, []ingressRule{from(pods(all))}, nil))),
			tcp(80, expectPeer(nsY, nsX, false), expectPeer(nsZ, nsX, false)))}},
		{Name: "should deny ingress access to updated pod", Steps: []Step{
			step(actions(create(policy("x", "deny-ingress-via-label-selector", matchLabels("target", "isolated"), noRules(), nil))),
				tcp(80)),
			step(actions(Action{LabelPod: &xa, Labels: map[string]string{"target": "isolated"}}),
				tcp(80, allIngress(xa, false))),
		}},
		{Name: "should deny egress from pods based on PodSelector", Steps: []Step{step(
			actions(create(policy("x", "deny-egress-pod-a", podA, nil, noEgress()))),
			tcp(80, allEgress(xa, false)))}},
		{Name: "should deny egress from all pods in a namespace", Steps: []Step{step(
			actions(create(policy("x", "deny-egress-ns-x", all, nil, noEgress()))),
			tcp(80, expectPeer(nsX, anyPod, false)))}},
		{Name: "should work with Ingress, Egress specified together", Steps: []Step{step(
			actions(create(policy("x", "allow-client-a-via-pod-selector", podA,
				[]ingressRule{from(pods(matchLabels("pod", "b")))}, []egressRule{egressPorts(egressRule{}, intPort(80))}))),
			tcp(80, allIngress(xa, false), expect(xb, xa, true)),
			tcp(81, allIngress(xa, false), allEgress(xa, false), expect(xb, xa, true)))}},
	}
}

// stackedPolicies: a port-81 allow, then a port-80 allow added on top.
func stackedPolicies() Case {
	allow := func(name string, port int32) *networkingv1.NetworkPolicy {
		return policy("x", name, podA, []ingressRule{withPorts(from(nss(nsName("y"))), portOf(corev1.ProtocolTCP, port))}, nil)
	}
	allowY := []Expectation{expectPeer(nsX, Peer(xa), false), expectPeer(nsY, Peer(xa), true), expectPeer(nsZ, Peer(xa), false)}
	return Case{Name: "should enforce multiple, stacked policies with overlapping podSelectors", Steps: []Step{
		step(actions(create(allow("allow-client-a-via-ns-selector", 81))), tcp(81, allowY...), tcp(80, allIngress(xa, false))),
		step(actions(create(allow("allow-client-a-via-ns-selector-80", 80))), tcp(80, allowY...)),
	}}
}

// updatedPolicy: allow-all, then updated to deny-all.
func updatedPolicy() Case {
	return Case{Name: "should enforce updated policy", Steps: []Step{
		step(actions(create(policy("x", "allow-all-mutate-to-deny-all", all, []ingressRule{{}}, nil))), tcp(81)),
		step(actions(Action{Update: static(policy("x", "allow-all-mutate-to-deny-all", all, noRules(), nil))}),
			tcp(81, expectPeer(anyPod, nsX, false))),
	}}
}
