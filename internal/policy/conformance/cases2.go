package conformance

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tcpCasesC are upstream's TCP cases on egress and on several policies adding up,
// from "denying of egress traffic on the client side" to "stop enforcing policies
// after they are deleted".
func tcpCasesC() []Case {
	fromXA := []ingressRule{from(nsAndPods(nsName("x"), matchLabels("pod", "a")))}
	return []Case{
		{Name: "should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)", Steps: []Step{step(
			actions(create(policy("x", "allow-to-ns-y-pod-a", podA, nil, []egressRule{to(nsAndPods(nsName("y"), matchLabels("pod", "a")))})),
				create(policy("y", "allow-from-xa-on-ya-match-selector", podA, fromXA, nil)),
				create(policy("y", "allow-from-xa-on-yb-match-selector", matchLabels("pod", "b"), fromXA, nil))),
			tcp(80, expectPeer(Peer(xa), anyPod, false), expectPeer(anyPod, Peer(ya), false),
				expectPeer(Peer(xa), Peer(ya), true), expectPeer(anyPod, Peer(yb), false)))}},
		{Name: "should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector", Steps: []Step{step(
			actions(create(policy("x", "allow-to-ns-y-pod-a", podA, nil, []egressRule{to(nsAndPods(nsName("y"), matchLabels("pod", "a")))}))),
			tcp(80, allEgress(xa, false), expect(xa, ya, true)))}},
		{Name: "should enforce ingress policy allowing any port traffic to a server on a specific protocol", Steps: []Step{step(
			actions(create(policy("x", "allow-ingress-by-proto", podA, []ingressRule{withPorts(ingressRule{}, protoOnly(corev1.ProtocolTCP))}, nil))),
			tcp(80), udp(80, expectPeer(anyPod, Peer(xa), false)))}},
		{Name: "should enforce multiple ingress policies with ingress allow-all policy taking precedence", Steps: []Step{
			step(actions(create(policy("x", "allow-ingress-port-80", all, []ingressRule{withPorts(ingressRule{}, intPort(80))}, nil))),
				tcp(81, expectPeer(anyPod, nsX, false))),
			step(actions(create(policy("x", "allow-ingress", all, []ingressRule{{}}, nil))), tcp(81)),
		}},
		{Name: "should enforce multiple egress policies with egress allow-all policy taking precedence", Steps: []Step{
			step(actions(create(policy("x", "allow-egress-port-80", all, nil, []egressRule{egressPorts(egressRule{}, intPort(80))}))),
				tcp(81, expectPeer(nsX, anyPod, false))),
			step(actions(create(policy("x", "allow-egress", all, nil, []egressRule{{}}))), tcp(81)),
		}},
		{Name: "should stop enforcing policies after they are deleted", Steps: []Step{
			step(actions(create(policy("x", "deny-all", all, noRules(), noEgress()))),
				tcp(80, expectPeer(nsX, anyPod, false), expectPeer(anyPod, nsX, false))),
			step(actions(Action{DeleteAll: true}), tcp(80)),
		}},
	}
}

// tcpCasesD are upstream's last TCP cases: CIDR blocks and their exceptions, ingress
// and egress controlled apart, ports of one protocol only, and the default namespace
// label, from "egress access to server in CIDR block" to "NamespaceSelector with
// MatchExpressions using default ns label".
func tcpCasesD() []Case {
	return []Case{
		{Name: "should allow egress access to server in CIDR block", Steps: []Step{step(
			actions(Action{Create: func(ips IPs) *networkingv1.NetworkPolicy {
				return policy("x", "allow-client-a-via-cidr-egress-rule", podA, nil, []egressRule{to(ipBlock(host(ips[yb])))})
			}}),
			tcp(80, allEgress(xa, false), expect(xa, yb, true)))}},
		{Name: "should enforce except clause while egress access to server in CIDR block", Steps: []Step{step(
			actions(Action{Create: exceptXB}),
			tcp(80, expect(xa, xb, false)))}},
		{Name: "should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", Steps: []Step{
			step(actions(Action{Create: exceptXB}), tcp(80, expect(xa, xb, false))),
			step(actions(Action{Update: func(ips IPs) *networkingv1.NetworkPolicy {
				return policy("x", "allow-client-a-via-cidr-egress-rule", podA, nil, []egressRule{to(ipBlock(host(ips[xb])))})
			}}), tcp(80, allEgress(xa, false), expect(xa, xb, true))),
		}},
		{Name: "should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector", Steps: []Step{
			step(actions(create(policy("x", "allow-egress-for-target", podA, nil, []egressRule{{}}))), tcp(80)),
			step(actions(create(policy("x", "deny-ingress-via-label-selector", podA, noRules(), nil))), tcp(80, allIngress(xa, false))),
		}},
		{Name: "should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP", Steps: []Step{step(
			actions(create(policy("x", "deny-ingress", all, noRules(), nil)),
				create(policy("x", "allow-only-sctp-ingress-on-port-81", podA, []ingressRule{withPorts(ingressRule{}, portOf(corev1.ProtocolSCTP, 81))}, nil))),
			tcp(81, expectPeer(anyPod, nsX, false)))}},
		{Name: "should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP", Steps: []Step{step(
			actions(create(policy("x", "allow-only-sctp-ingress-on-port-80", podA, []ingressRule{withPorts(ingressRule{}, portOf(corev1.ProtocolSCTP, 80))}, nil))),
			tcp(81, allIngress(xa, false)))}},
		{Name: "should not allow access by TCP when a policy specifies only UDP", Steps: []Step{step(
			actions(create(policy("x", "allow-only-udp-ingress-on-port-81", podA, []ingressRule{withPorts(ingressRule{}, portOf(corev1.ProtocolUDP, 81))}, nil))),
			tcp(81, allIngress(xa, false)))}},
		{Name: "should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label", Steps: []Step{step(
			actions(create(policy("x", "allow-client-a-via-ns-selector-for-immutable-ns-label", podA, []ingressRule{from(nss(matchLabels(corev1.LabelMetadataName, "y")))}, nil))),
			tcp(80, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)))}},
		{Name: "should enforce policy based on NamespaceSelector with MatchExpressions using default ns label", Steps: []Step{step(
			actions(create(policy("x", "allow-ns-y-match-selector-for-immutable-ns-label", podA, nil,
				[]egressRule{to(nss(expr(corev1.LabelMetadataName, metav1.LabelSelectorOpNotIn, "y")))}))),
			tcp(80, expectPeer(Peer(xa), nsY, false)))}},
	}
}

// exceptXB allows x/a egress to the /4 around x/b except x/b itself.
func exceptXB(ips IPs) *networkingv1.NetworkPolicy {
	return policy("x", "allow-client-a-via-cidr-egress-rule", podA, nil,
		[]egressRule{to(ipBlock(large(ips[xb]), host(ips[xb])))})
}

// udpSCTPCases are upstream's UDP and SCTP groups ("using UDP", "using SCTP").
func udpSCTPCases() []Case {
	ports81 := func(proto corev1.Protocol) *networkingv1.NetworkPolicy {
		return policy("x", "allow-ingress-on-port-81-ns-x", podA, []ingressRule{withPorts(from(nss(nsName("y"))), portOf(proto, 81))}, nil)
	}
	podAndNS := policy("x", "allow-ns-y-pod-a-via-namespace-pod-selector", podA, []ingressRule{from(nsAndPods(nsName("y"), matchLabels("pod", "a")))}, nil)
	denyAll := policy("x", "deny-all", all, noRules(), nil)
	return []Case{
		{Name: "UDP: should support a 'default-deny-ingress' policy", Steps: []Step{step(actions(create(denyAll)),
			udp(80, expectPeer(anyPod, nsX, false)))}},
		{Name: "UDP: should enforce policy based on Ports", Steps: []Step{step(actions(create(ports81(corev1.ProtocolUDP))),
			udp(81, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)))}},
		{Name: "UDP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector",
			Steps: []Step{step(actions(create(podAndNS)), udp(80, allIngress(xa, false), expect(ya, xa, true)))}},
		{Name: "SCTP: should support a 'default-deny-ingress' policy", Skip: noSCTPServer, Steps: []Step{step(actions(create(denyAll)),
			sctp(80, expectPeer(anyPod, nsX, false)))}},
		{Name: "SCTP: should enforce policy based on Ports", Skip: noSCTPServer, Steps: []Step{step(actions(create(ports81(corev1.ProtocolSCTP))),
			sctp(81, expectPeer(nsX, Peer(xa), false), expectPeer(nsZ, Peer(xa), false)))}},
		{Name: "SCTP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector",
			Skip: noSCTPServer, Steps: []Step{step(actions(create(podAndNS)), sctp(80, allIngress(xa, false), expect(ya, xa, true)))}},
	}
}
