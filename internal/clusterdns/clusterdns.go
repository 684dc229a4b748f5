package clusterdns

import (
	"fmt"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Version is the CoreDNS release make setup builds (scripts/versions.sh COREDNS_VERSION).
const Version = "v1.12.4"

// Namespace, Name and ServiceName are where cluster DNS lives, as in kubeadm clusters:
// the e2e suite and users look for the Service kube-dns and the label k8s-app=kube-dns.
const (
	Namespace   = "kube-system"
	Name        = "coredns"
	ServiceName = "kube-dns"
)

// Labels select the CoreDNS pods.
var Labels = map[string]string{"k8s-app": "kube-dns"}

// Options say how CoreDNS runs.
type Options struct {
	ServiceIP netip.Addr // the kube-dns ClusterIP: the kubelets' clusterDNS
	Domain    string     // the cluster domain ("cluster.local")
	Replicas  int32
	// Image runs CoreDNS from an image (a real kubelet and containerd). Empty: run the
	// host binary HostBinary with the Corefile at HostCorefile (the lab runtime, whose
	// pods are host programs), reaching the apiserver through Kubeconfig.
	Image        string
	HostBinary   string
	HostCorefile string
	Kubeconfig   string
}

// Validate names the first option that can't work.
func (o Options) Validate() error {
	switch {
	case !o.ServiceIP.Is4():
		return fmt.Errorf("cluster DNS service IP %v: must be an IPv4 address in the service CIDR", o.ServiceIP)
	case o.Domain == "" || strings.ContainsAny(o.Domain, " /"):
		return fmt.Errorf("cluster domain %q: must be a DNS name such as cluster.local", o.Domain)
	case o.Replicas < 1:
		return fmt.Errorf("cluster DNS replicas %d: must be at least 1", o.Replicas)
	case o.Image == "" && (o.HostBinary == "" || o.HostCorefile == "" || o.Kubeconfig == ""):
		return fmt.Errorf("cluster DNS without an image needs the host's coredns binary, a Corefile path and a kubeconfig")
	}
	return nil
}

// Corefile is CoreDNS's configuration: the cluster's names from the kubernetes plugin,
// health on :8080 and readiness on :8181, metrics on :9153. Nothing is forwarded: the
// lab has no upstream resolver, and a name outside the cluster domain gets an answer
// (REFUSED/SERVFAIL) instead of a wait.
func (o Options) Corefile() string {
	kubeconfig := ""
	if o.Image == "" {
		kubeconfig = fmt.Sprintf("\n        kubeconfig %s myelin-lab", o.Kubeconfig)
	}
	return fmt.Sprintf(`.:53 {
    errors
    health :8080
    ready :8181
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30%s
    }
    prometheus :9153
    cache 30
    reload
    loadbalance
}
`, o.Domain, kubeconfig)
}

// Objects are the objects of cluster DNS, in creation order: ServiceAccount, ClusterRole
// and its binding (what the kubernetes plugin lists and watches), the Corefile's
// ConfigMap, the Deployment and the kube-dns Service.
func (o Options) Objects() []any {
	meta := metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: Labels}
	role := metav1.ObjectMeta{Name: "system:coredns", Labels: Labels}
	return []any{
		&corev1.ServiceAccount{ObjectMeta: meta},
		&rbacv1.ClusterRole{ObjectMeta: role, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: role,
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: Name, Namespace: Namespace}}},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": o.Corefile()}},
		o.deployment(meta),
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: Labels},
			Spec: corev1.ServiceSpec{Selector: Labels, ClusterIP: o.ServiceIP.String(), Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			}},
		},
	}
}

func (o Options) deployment(meta metav1.ObjectMeta) *appsv1.Deployment {
	c := corev1.Container{Name: "coredns", Ports: []corev1.ContainerPort{
		{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
	}}
	spec := corev1.PodSpec{
		ServiceAccountName: Name,
		// CoreDNS resolves the cluster's names itself; its own resolv.conf is the node's.
		DNSPolicy:         corev1.DNSDefault,
		PriorityClassName: "system-cluster-critical",
		Tolerations:       []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}, {Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}},
	}
	if o.Image != "" {
		c.Image, c.ImagePullPolicy = o.Image, corev1.PullNever
		c.Args = []string{"-conf", "/etc/coredns/Corefile"}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 2}
		c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10, FailureThreshold: 5}
		spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: Name}}}}}
	} else {
		c.Image = "host"
		c.Command = []string{o.HostBinary, "-conf", o.HostCorefile}
	}
	spec.Containers = []corev1.Container{c}
	replicas := o.Replicas
	return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: Labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: Labels}, Spec: spec},
	}}
}
