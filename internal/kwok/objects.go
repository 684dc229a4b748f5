package kwok

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NamespacePrefix starts the names of the namespaces that hold the simulated pods and
// Services, ServicesPerNamespace Services and their pods in each. One namespace of
// 10,000 Services and 50,000 pods kept the controller-manager's EndpointSlice and
// Endpoints controllers busy for minutes: each Service's sync lists its namespace's
// pods and each pod update matches the namespace's Services.
const (
	NamespacePrefix      = "kwok-scale-"
	ServicesPerNamespace = 100
)

// Every simulated pod has the label podLabel=podLabelValue; PodSelector selects them.
const (
	podLabel      = "app"
	podLabelValue = "kwok-scale"
	PodSelector   = podLabel + "=" + podLabelValue
)

// NamespaceName is the name of simulated namespace k.
func NamespaceName(k int) string { return fmt.Sprintf("%s%03d", NamespacePrefix, k) }

// IsNamespace says whether ns is a simulated namespace.
func IsNamespace(ns string) bool { return strings.HasPrefix(ns, NamespacePrefix) }

// Shape is a simulated cluster: Nodes kwok nodes, Pods pods spread round-robin over
// them, Services ClusterIP Services each selecting Pods/Services of the pods (pod i
// belongs to Service i mod Services, in that Service's namespace), so their
// EndpointSlices hold every pod.
type Shape struct {
	Nodes    int `json:"nodes"`
	Pods     int `json:"pods"`
	Services int `json:"services"`
}

// Limits of a Shape in the lab's address plan: PodCIDRs are /26s of the lab's cluster
// CIDR after its first /24 (the real node's), node IPs share 150 addresses of segment A.
const (
	MaxNodes       = 1020
	MaxPodsPerNode = 62
	nodeIPFirst    = 100
	nodeIPCount    = 150
	// ServicePort is the port of every simulated Service; TargetPort the pods' port.
	ServicePort = 80
	TargetPort  = 8080
)

// Validate says what is wrong with the shape, naming the flag to change.
func (s Shape) Validate() error {
	switch {
	case s.Nodes < 1 || s.Nodes > MaxNodes:
		return fmt.Errorf("scale: --kwok-nodes %d: must be 1-%d (a /26 PodCIDR each out of the lab's cluster CIDR)", s.Nodes, MaxNodes)
	case s.Pods < 1 || s.Pods > s.Nodes*MaxPodsPerNode:
		return fmt.Errorf("scale: --pods %d: must be 1-%d (%d per node in a /26)", s.Pods, s.Nodes*MaxPodsPerNode, MaxPodsPerNode)
	case s.Services < 1 || s.Services > s.Pods:
		return fmt.Errorf("scale: --services %d: must be 1-%d (every Service needs a pod)", s.Services, s.Pods)
	}
	return nil
}

// Namespaces is how many namespaces the shape's Services and pods take.
func (s Shape) Namespaces() int {
	return (s.Services + ServicesPerNamespace - 1) / ServicesPerNamespace
}

// ServiceNamespace is the namespace of simulated Service j.
func ServiceNamespace(j int) string { return NamespaceName(j / ServicesPerNamespace) }

// PodNamespace is the namespace of simulated pod i: its Service's.
func (s Shape) PodNamespace(i int) string { return ServiceNamespace(i % s.Services) }

// NodeName is the name of simulated node i.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%04d", i) }

// PodName is the name of simulated pod i.
func PodName(i int) string { return fmt.Sprintf("kp-%05d", i) }

// ServiceName is the name of simulated Service j.
func ServiceName(j int) string { return fmt.Sprintf("ks-%05d", j) }

// NodePodCIDR is node i's PodCIDR: the (i+4)th /26 of clusterCIDR (a /16 or larger),
// so the first /24, which the controller-manager gives the lab's real node, stays free.
func NodePodCIDR(clusterCIDR netip.Prefix, i int) netip.Prefix {
	a := clusterCIDR.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i+4) * 64
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 26)
}

// NodeIP is node i's InternalIP: one of 150 addresses of the lab's segment A (a /24)
// that no lab host uses, shared by several simulated nodes. The real agent routes each
// node's PodCIDR via it, on-link, and nothing answers there: no packet leaves the lab.
func NodeIP(segmentA netip.Prefix, i int) netip.Addr {
	a := segmentA.Masked().Addr().As4()
	a[3] = byte(nodeIPFirst + i%nodeIPCount)
	return netip.AddrFrom4(a)
}

// Node is simulated node i, annotated for kwok and tainted so nothing is scheduled on it.
func Node(i int, clusterCIDR, segmentA netip.Prefix) *corev1.Node {
	cidr := NodePodCIDR(clusterCIDR, i).String()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName(i),
			Annotations: map[string]string{AnnotationKey: AnnotationValue},
			Labels:      map[string]string{LabelKey: LabelValue, corev1.LabelHostname: NodeName(i)}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr},
			Taints: []corev1.Taint{{Key: AnnotationKey, Value: AnnotationValue, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: NodeIP(segmentA, i).String()},
			{Type: corev1.NodeHostName, Address: NodeName(i)}}},
	}
}

// Pod is simulated pod i of shape s: bound to node i mod Nodes (no scheduler), in
// Service i mod Services. It tolerates its node being not ready or unreachable, as a
// DaemonSet's pods do: on a loaded 2-vCPU machine kwok sometimes renews a node's lease
// late, and the controller-manager would evict the node's pods for good after 5
// minutes (nothing recreates them), leaving the simulation short of pods.
func (s Shape) Pod(i int) *corev1.Pod {
	no := false
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(i), Namespace: s.PodNamespace(i),
			Labels: map[string]string{podLabel: podLabelValue, "svc": ServiceName(i % s.Services)}},
		Spec: corev1.PodSpec{
			NodeName:                      NodeName(i % s.Nodes),
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &zero,
			Tolerations: []corev1.Toleration{{Key: AnnotationKey, Operator: corev1.TolerationOpExists},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
			Containers: []corev1.Container{{Name: "app", Image: "kwok-simulated",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: TargetPort}}}},
		},
	}
}

// Service is simulated Service j.
func Service(j int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName(j), Namespace: ServiceNamespace(j)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"svc": ServiceName(j)},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: ServicePort,
				TargetPort: intstr.FromInt32(TargetPort)}},
		},
	}
}
