// Package conformance holds the upstream Kubernetes NetworkPolicy truth
// tables (test/e2e/network/netpol/network_policy.go of Kubernetes v1.34),
// transcribed as data: the policies each case creates, the changes it
// makes, and the connectivity it expects between the pods a, b and c of
// namespaces x, y and z on ports 80 and 81. The e2e test runs them against
// a lab (test/e2e/netpol_test.go); the unit tests check them against what
// internal/policy computes.
package conformance

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Namespaces and Pods are the model's; every pod serves TCP and UDP on
// ports 80 and 81, named serve-80-tcp, serve-80-udp, serve-81-tcp and
// serve-81-udp, and carries the label pod=<name>.
var (
	Namespaces = []string{"x", "y", "z"}
	Pods       = []string{"a", "b", "c"}
	Ports      = []int32{80, 81}
)

// PodRef is one pod of the model.
type PodRef struct{ NS, Pod string }

func (p PodRef) String() string { return p.NS + "/" + p.Pod }

// AllPods are the nine pods of the model.
func AllPods() []PodRef {
	var out []PodRef
	for _, ns := range Namespaces {
		for _, p := range Pods {
			out = append(out, PodRef{ns, p})
		}
	}
	return out
}

// PortName is the container port name upstream gives port/proto.
func PortName(port int32, proto corev1.Protocol) string {
	p := "tcp"
	switch proto {
	case corev1.ProtocolUDP:
		p = "udp"
	case corev1.ProtocolSCTP:
		p = "sctp"
	}
	return fmt.Sprintf("serve-%d-%s", port, p)
}

// Peer selects pods of the reachability matrix: empty fields match all.
type Peer struct{ NS, Pod string }

func (p Peer) matches(r PodRef) bool {
	return (p.NS == "" || p.NS == r.NS) && (p.Pod == "" || p.Pod == r.Pod)
}

// Expectation changes the reachability matrix: From -> To is Allowed.
type Expectation struct {
	From, To Peer
	Allowed  bool
}

// Probe is one truth table: connections on Port/Proto, all allowed but
// for the expectations, applied in order.
type Probe struct {
	Port   int32
	Proto  corev1.Protocol
	Expect []Expectation
}

// Expected says whether from -> to must connect. Loopback is not
// checked upstream (ignoreLoopback); callers skip from == to.
func (p Probe) Expected(from, to PodRef) bool {
	ok := true
	for _, e := range p.Expect {
		if e.From.matches(from) && e.To.matches(to) {
			ok = e.Allowed
		}
	}
	return ok
}

// IPs are the pods' addresses, for policies with ipBlocks.
type IPs map[PodRef]netip.Addr

// Action is one change a step makes before probing.
type Action struct {
	// Create or Update a policy (built from the pods' addresses).
	Create, Update func(IPs) *networkingv1.NetworkPolicy
	// DeleteAll deletes every policy of the model's namespaces.
	DeleteAll bool
	// LabelNamespace adds Labels to that namespace, LabelPod to that pod
	// (upstream's AddNamespaceLabel and AddPodLabels: added, not replaced).
	LabelNamespace string
	LabelPod       *PodRef
	Labels         map[string]string
}

// Step makes its changes, then probes.
type Step struct {
	Do     []Action
	Probes []Probe
}

// Case is one upstream test.
type Case struct {
	Name string
	// Skip, when set, says why the case does not run here.
	Skip  string
	Steps []Step
}
