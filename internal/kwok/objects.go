package kwok

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Namespace holds the simulated pods and their Services.
const Namespace = "kwok-scale"

// Shape is a simulated cluster: Nodes kwok nodes, Pods pods spread round-robin over
// them, Services ClusterIP Services each selecting Pods/Services of the pods (pod i
// belongs to Service i mod Services), so their EndpointSlices hold every pod.
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
// Service i mod Services.
func (s Shape) Pod(i int) *corev1.Pod {
	no := false
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(i), Namespace: Namespace,
			Labels: map[string]string{"app": "kwok-scale", "svc": ServiceName(i % s.Services)}},
		Spec: corev1.PodSpec{
			NodeName:                      NodeName(i % s.Nodes),
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &zero,
			Tolerations:                   []corev1.Toleration{{Key: AnnotationKey, Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "app", Image: "kwok-simulated",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: TargetPort}}}},
		},
	}
}

// Service is simulated Service j.
func Service(j int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName(j), Namespace: Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"svc": ServiceName(j)},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: ServicePort,
				TargetPort: intstr.FromInt32(TargetPort)}},
		},
	}
}
