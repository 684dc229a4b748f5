// Package policy computes what the datapath must hold to enforce Kubernetes
// NetworkPolicy on one node (docs/policy.md): peer identities, the
// IP → identity map, and each local pod's isolation flags and allow
// entries. Everything here is pure: Compute and Trace take the Pods,
// Namespaces and NetworkPolicies as values; the agent's policy loop feeds
// them from informers and writes the result (internal/agent/policy.go).
package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

// IP protocol numbers of the protocols NetworkPolicy names.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// Pod is what policy needs of a Pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	// IP is the pod's IPv4; pods without one (pending, host network) are
	// no peers: host-network pods are their node's address.
	IP    netip.Addr
	Node  string
	Ports []NamedPort
}

// NamedPort is a container port with a name.
type NamedPort struct {
	Name  string
	Proto uint8
	Port  uint16
}

// Ref is "namespace/name".
func (p Pod) Ref() string { return p.Namespace + "/" + p.Name }

// PodOf converts a Pod; ok is false for pods that are no peers (no IPv4,
// host network).
func PodOf(p *corev1.Pod) (Pod, bool) {
	if p.Spec.HostNetwork || p.Status.PodIP == "" {
		return Pod{}, false
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !ip.Is4() {
		return Pod{}, false
	}
	out := PodWithoutIP(p)
	out.IP = ip
	return out, true
}

// PodWithoutIP is what policy reads of a pod but its address (the zero Addr): for a pod
// whose status has none yet, to be completed with the address its node gave it. Its
// named ports are its containers' and then its sidecars' (init containers with
// restartPolicy Always, which run beside them), the order in which Kubernetes
// resolves a Service's named targetPort (the first of a name wins).
func PodWithoutIP(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Node: p.Spec.NodeName}
	containers := slices.Clip(p.Spec.Containers) // appending never writes the pod's array
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	for _, c := range containers {
		for _, cp := range c.Ports {
			if cp.Name == "" {
				continue
			}
			proto, err := protoNumber(cp.Protocol)
			if err != nil {
				continue
			}
			out.Ports = append(out.Ports, NamedPort{Name: cp.Name, Proto: proto, Port: uint16(cp.ContainerPort)})
		}
	}
	return out
}

// protoNumber maps a Kubernetes protocol (empty: TCP) to its IP protocol number.
func protoNumber(p corev1.Protocol) (uint8, error) {
	switch p {
	case "", corev1.ProtocolTCP:
		return ProtoTCP, nil
	case corev1.ProtocolUDP:
		return ProtoUDP, nil
	case corev1.ProtocolSCTP:
		return ProtoSCTP, nil
	}
	return 0, fmt.Errorf("protocol %q: want TCP, UDP or SCTP", p)
}

// ProtoName is the Kubernetes name of an IP protocol number.
func ProtoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "TCP"
	case ProtoUDP:
		return "UDP"
	case ProtoSCTP:
		return "SCTP"
	case 0:
		return "any"
	}
	return fmt.Sprintf("proto-%d", p)
}

// peer is what a rule can tell about the other end of a packet: a pod
// (namespace, labels, its namespace's labels, named ports) or an address,
// and the policy CIDRs containing its address. Peers with equal keys are
// one identity.
type peer struct {
	pod       bool
	namespace string
	labels    map[string]string
	nsLabels  map[string]string
	ports     []NamedPort
	atoms     []netip.Prefix // policy CIDRs containing the address, sorted
}

// keyer renders identity keys (docs/policy.md) for one computation. It renders each
// label map once: a workload's pods share one (the agent's cache interns them) and a
// namespace's pods their namespace's, so with 50,000 pods most keys are assembled
// from strings already rendered. The maps are not changed during a computation, so
// their address names them.
type keyer struct {
	rendered map[unsafe.Pointer]string
	pods     map[podKeyParts]string // the pod part of keys, for pods sharing their maps and ports
}

// podKeyParts names what the pod part of a key is made of: the namespace, and the
// label maps and port list by their addresses (the agent's cache shares them among
// pods of the same shape). Pods whose parts are equal but not shared get the same key,
// rendered once each.
type podKeyParts struct {
	namespace               string
	labels, nsLabels, ports unsafe.Pointer
	portCount               int
}

func newKeyer() *keyer {
	return &keyer{rendered: map[unsafe.Pointer]string{}, pods: map[podKeyParts]string{}}
}

// key is the identity key of p.
func (k *keyer) key(p peer) string {
	s := "cidr"
	if p.pod {
		s = k.podKey(p)
	}
	if len(p.atoms) == 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s)
	for _, a := range p.atoms {
		b.WriteString("|" + a.String())
	}
	return b.String()
}

// podKey is the pod part of p's key: namespace, labels, namespace labels, named ports.
func (k *keyer) podKey(p peer) string {
	parts := podKeyParts{namespace: p.namespace, labels: mapAddr(p.labels), nsLabels: mapAddr(p.nsLabels),
		ports: unsafe.Pointer(unsafe.SliceData(p.ports)), portCount: len(p.ports)}
	if s, ok := k.pods[parts]; ok {
		return s
	}
	s := "pod|" + p.namespace + "|" + k.labels(p.labels) + "|" + k.labels(p.nsLabels) + "|" + portsKey(p.ports)
	k.pods[parts] = s
	return s
}

// mapAddr is m's address (nil for a nil map).
func mapAddr(m map[string]string) unsafe.Pointer {
	if m == nil {
		return nil
	}
	return reflect.ValueOf(m).UnsafePointer()
}

// labels renders m as its sorted "key=value," pairs.
func (k *keyer) labels(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	ptr := mapAddr(m)
	if s, ok := k.rendered[ptr]; ok {
		return s
	}
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(key + "=" + m[key] + ",")
	}
	k.rendered[ptr] = b.String()
	return b.String()
}

// portsKey renders named ports as their sorted "name/proto/port", comma-separated.
func portsKey(ports []NamedPort) string {
	out := make([]string, 0, len(ports))
	for _, np := range ports {
		out = append(out, np.Name+"/"+strconv.Itoa(int(np.Proto))+"/"+strconv.Itoa(int(np.Port)))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// namedPort returns the port named name for proto, if p has it.
func (p peer) namedPort(name string, proto uint8) (uint16, bool) {
	for _, np := range p.ports {
		if np.Name == name && np.Proto == proto {
			return np.Port, true
		}
	}
	return 0, false
}

// OwnAddresses keeps the pods of node (their addresses are the ones this node's CNI
// gave them) and the pods whose address lies in their own node's PodCIDR (podCIDRs:
// by node name, the ranges routing accepts, routing.Peers), and returns the others as
// refused: a node's kubelet writes its pods' status, so a compromised node could give
// one of its pods another node's pod's address, or an outside address, and with it
// that pod's identity in every node's policy. A refused pod is no peer: its address
// is what it would be without it (world, or another pod's). kept reuses pods' array.
func OwnAddresses(pods []Pod, node string, podCIDRs map[string]netip.Prefix) (kept, refused []Pod) {
	kept = pods[:0]
	for _, p := range pods {
		if cidr, ok := podCIDRs[p.Node]; p.Node == node || ok && cidr.Contains(p.IP) {
			kept = append(kept, p)
		} else {
			refused = append(refused, p)
		}
	}
	return kept, refused
}
