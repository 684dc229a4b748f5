package conformance

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// nsLabel is the label every namespace carries with its name.
const nsLabel = "kubernetes.io/metadata.name"

type (
	ingressRule = networkingv1.NetworkPolicyIngressRule
	egressRule  = networkingv1.NetworkPolicyEgressRule
	npPeer      = networkingv1.NetworkPolicyPeer
	npPort      = networkingv1.NetworkPolicyPort
)

func matchLabels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

// policy builds a policy in ns selecting sel; ingress/egress nil leave that
// type out, an empty non-nil slice isolates with no rules.
func policy(ns, name string, sel *metav1.LabelSelector, ingress []ingressRule, egress []egressRule) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	np.Spec.PodSelector = *sel
	if ingress != nil {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		np.Spec.Ingress = ingress
	}
	if egress != nil {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		np.Spec.Egress = egress
	}
	return np
}

// static wraps a policy that needs no addresses.
func static(np *networkingv1.NetworkPolicy) func(IPs) *networkingv1.NetworkPolicy {
	return func(IPs) *networkingv1.NetworkPolicy { return np }
}

func create(np *networkingv1.NetworkPolicy) Action { return Action{Create: static(np)} }

func noRules() []ingressRule { return []ingressRule{} }
func noEgress() []egressRule { return []egressRule{} }

func from(peers ...npPeer) ingressRule { return ingressRule{From: peers} }
func to(peers ...npPeer) egressRule    { return egressRule{To: peers} }

func pods(sel *metav1.LabelSelector) npPeer { return npPeer{PodSelector: sel} }
func nss(sel *metav1.LabelSelector) npPeer  { return npPeer{NamespaceSelector: sel} }
func nsAndPods(ns, pod *metav1.LabelSelector) npPeer {
	return npPeer{NamespaceSelector: ns, PodSelector: pod}
}
func ipBlock(cidr string, except ...string) npPeer {
	return npPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func portOf(proto corev1.Protocol, port int32) npPort {
	p, v := proto, intstr.FromInt32(port)
	return npPort{Protocol: &p, Port: &v}
}

// intPort is a port number without a protocol (TCP by default).
func intPort(port int32) npPort { v := intstr.FromInt32(port); return npPort{Port: &v} }

func named(name string) npPort { v := intstr.FromString(name); return npPort{Port: &v} }

func namedTCP(name string) npPort {
	p, v := corev1.ProtocolTCP, intstr.FromString(name)
	return npPort{Protocol: &p, Port: &v}
}

func protoOnly(proto corev1.Protocol) npPort { p := proto; return npPort{Protocol: &p} }

func withPorts(r ingressRule, ports ...npPort) ingressRule { r.Ports = ports; return r }
func egressPorts(r egressRule, ports ...npPort) egressRule { r.Ports = ports; return r }

// Reachability expectations, named after upstream's.
func expectPeer(from, to Peer, ok bool) Expectation {
	return Expectation{From: from, To: to, Allowed: ok}
}
func expect(from, to PodRef, ok bool) Expectation {
	return Expectation{From: Peer(from), To: Peer(to), Allowed: ok}
}
func allIngress(to PodRef, ok bool) Expectation { return Expectation{To: Peer(to), Allowed: ok} }
func allEgress(from PodRef, ok bool) Expectation {
	return Expectation{From: Peer(from), Allowed: ok}
}

func tcp(port int32, e ...Expectation) Probe {
	return Probe{Port: port, Proto: corev1.ProtocolTCP, Expect: e}
}
func udp(port int32, e ...Expectation) Probe {
	return Probe{Port: port, Proto: corev1.ProtocolUDP, Expect: e}
}
func sctp(port int32, e ...Expectation) Probe {
	return Probe{Port: port, Proto: corev1.ProtocolSCTP, Expect: e}
}

func step(do []Action, probes ...Probe) Step { return Step{Do: do, Probes: probes} }
func actions(a ...Action) []Action           { return a }

// host is the /32 of a pod's address; large the /4 containing it (upstream's makeLargeCIDRForIP).
func host(ip netip.Addr) string  { return netip.PrefixFrom(ip, 32).String() }
func large(ip netip.Addr) string { return netip.PrefixFrom(ip, 4).Masked().String() }

var (
	xa, xb, xc = PodRef{"x", "a"}, PodRef{"x", "b"}, PodRef{"x", "c"}
	ya, yb     = PodRef{"y", "a"}, PodRef{"y", "b"}
	nsX        = Peer{NS: "x"}
	nsY        = Peer{NS: "y"}
	nsZ        = Peer{NS: "z"}
	anyPod     = Peer{}
	podA       = matchLabels("pod", "a")
	all        = matchLabels()
)

func nsName(ns string) *metav1.LabelSelector { return matchLabels(nsLabel, ns) }
