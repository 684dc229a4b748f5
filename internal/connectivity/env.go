package connectivity

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/k8s"
)

// The test's pods, Services and port; names are fixed inside the test namespace.
const (
	podClient  = "client"   // node A; the allowed client of the policy scenarios
	podServerA = "server-a" // node A, next to the client
	podServerB = "server-b" // node B
	podHost    = "host"     // node B, host network: host-to-pod and pod-to-host
	svcEcho    = "echo"     // NodePort over both servers
	svcLocal   = "echo-local"
	serverPort = 8080
	labelRole  = "myelin.io/connectivity-role"
	labelTest  = "myelin.io/connectivity-test"
	labelPod   = "myelin.io/connectivity-pod"
)

// env is what the scenarios run against: the deployed pods and Services and the nodes.
type env struct {
	ns       string
	nodes    []node // sorted by name; nodes[0] is node A, nodes[1] node B
	pods     map[string]pod
	services map[string]*corev1.Service
	hostPort int
	dnsIP    string // kube-system/kube-dns ClusterIP, "" if none
}

type node struct{ name, ip string }

type pod struct{ name, node, ip string }

func randomSuffix() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}

// readNodes returns the Ready nodes' names and InternalIPs, sorted by name.
func readNodes(ctx context.Context, o Options) ([]node, error) {
	list, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []node
	for _, n := range list.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		for _, a := range n.Status.Addresses {
			if ready && a.Type == corev1.NodeInternalIP {
				out = append(out, node{n.Name, a.Address})
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Ready node with an InternalIP: the cluster cannot run the test pods (kubectl get nodes)")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// pullPolicy is Never for an image named without a registry host (the default
// myelin/test:<version>, imported on the nodes): containerd would pull such a name from
// Docker Hub, where anyone may hold it, into a host-network pod with NET_RAW.
func pullPolicy(image string) corev1.PullPolicy {
	first, _, path := strings.Cut(image, "/")
	if path && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return corev1.PullIfNotPresent
	}
	return corev1.PullNever
}

// podSpec is one test pod: `myelin connectivity serve` on listen, named after the pod.
func podSpec(o Options, name, role, nodeName string, hostNetwork bool, listen string) *corev1.Pod {
	labels := map[string]string{labelTest: "true", labelRole: role, labelPod: name}
	if name == podClient {
		labels["access"] = "allowed"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   hostNetwork,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: o.Image, ImagePullPolicy: pullPolicy(o.Image),
				// Not `lab serve`: that refuses the host pod's node network namespace.
				Command: []string{o.Myelin, "connectivity", "serve", "--listen", listen, "--name", name},
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{"NET_RAW"}}},
			}},
		},
	}
}

func serviceSpec(name string, local bool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelTest: "true"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{labelRole: "server"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(serverPort)}},
		},
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return s
}

// deploy creates the pods and Services in the namespace createNamespace made; the
// caller deletes the namespace.
func deploy(ctx context.Context, o Options, nodes []node) (*env, error) {
	e := &env{ns: o.Namespace, nodes: nodes, pods: map[string]pod{}, services: map[string]*corev1.Service{},
		hostPort: 40000 + rand.IntN(20000)}
	a, b := nodes[0].name, nodes[len(nodes)-1].name
	specs := []*corev1.Pod{
		podSpec(o, podClient, "client", a, false, ":"+strconv.Itoa(serverPort)),
		podSpec(o, podServerA, "server", a, false, ":"+strconv.Itoa(serverPort)),
		podSpec(o, podServerB, "server", b, false, ":"+strconv.Itoa(serverPort)),
		podSpec(o, podHost, "host", b, true, ":"+strconv.Itoa(e.hostPort)),
	}
	for _, p := range specs {
		if _, err := o.Client.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return e, fmt.Errorf("create pod %s/%s: %w", e.ns, p.Name, err)
		}
	}
	for _, s := range []*corev1.Service{serviceSpec(svcEcho, false), serviceSpec(svcLocal, true)} {
		created, err := o.Client.CoreV1().Services(e.ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return e, fmt.Errorf("create service %s/%s: %w", e.ns, s.Name, err)
		}
		e.services[s.Name] = created
	}
	if dns, err := o.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); err == nil {
		e.dnsIP = dns.Spec.ClusterIP
	} else if !apierrors.IsNotFound(err) {
		return e, fmt.Errorf("get service kube-system/kube-dns: %w", err)
	}
	return e, e.waitReady(ctx, o, len(specs))
}

// waitReady waits until every pod runs with an IP and both Services have two ready
// endpoints.
func (e *env) waitReady(ctx context.Context, o Options, want int) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	state := ""
	for {
		state = e.readiness(ctx, o, want)
		if state == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("test pods not ready within %v: %s (kubectl -n %s get pods,endpointslices)", o.Timeout, state, e.ns)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// readiness returns what is not ready yet, "" when everything is.
func (e *env) readiness(ctx context.Context, o Options, want int) string {
	list, err := o.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !k8s.PodReady(&p) {
			return fmt.Sprintf("pod %s is %s on %s", p.Name, podState(&p), p.Spec.NodeName)
		}
		e.pods[p.Name] = pod{p.Name, p.Spec.NodeName, p.Status.PodIP}
	}
	if len(e.pods) < want {
		return fmt.Sprintf("%d of %d pods listed", len(e.pods), want)
	}
	for name := range e.services {
		slices, err := o.Client.DiscoveryV1().EndpointSlices(e.ns).List(ctx,
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err.Error()
		}
		ready := 0
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ready++
				}
			}
		}
		if ready < 2 {
			return fmt.Sprintf("service %s has %d of 2 ready endpoints", name, ready)
		}
	}
	return ""
}

func podState(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			return fmt.Sprintf("%s (%s: %s; restarts %d)", p.Status.Phase, w.Reason, w.Message, c.RestartCount)
		}
		if t := c.LastTerminationState.Terminated; t != nil && !c.Ready {
			return fmt.Sprintf("%s, not ready (last exit %d: %s; restarts %d)", p.Status.Phase, t.ExitCode, t.Reason, c.RestartCount)
		}
	}
	if p.Status.Phase == corev1.PodRunning && !k8s.PodReady(p) {
		return "Running, not ready"
	}
	return string(p.Status.Phase)
}
