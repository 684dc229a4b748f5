package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
)

// Service proxies a ServiceScale lab runs.
const (
	ProxyMyelin   = "myelin"   // kube-proxy-replacement: myelin's BPF load balancer
	ProxyIPTables = "iptables" // kube-proxy in iptables mode, myelin with legacy host routing
	ProxyNFTables = "nftables" // kube-proxy in nftables mode
	// ProxySockLB is myelin with bpf-lb-sock on both nodes: the client's connect() is
	// translated by socket-LB (socklb.go in internal/datapath), not per packet.
	ProxySockLB = "myelin-socklb"
)

// The measured Service: one netserver backend, its control port and a fixed data port
// (TCP_CRR opens one data connection per transaction; both must reach the same backend).
const (
	svcControlPort = 12865
	svcDataPort    = 12866
	svcFillerPort  = 8080
	svcSetupLimit  = 30 * time.Minute
)

// ServiceScale is a 2-node myelin lab whose Services are served by Proxy, with Services
// ClusterIP Services of 2 backends each besides the measured one: the Service
// connection rate at 10, 1,000 and 10,000 Services, myelin against kube-proxy. The
// client pod runs on node-1 and the netserver backend on node-2. The environments of
// one proxy share a lab (ServiceScaleLab): each count adds Services to what the one
// before it left.
type ServiceScale struct {
	Proxy    string
	Services int

	lab  *ServiceScaleLab
	held bool
}

// ServiceScaleLab is the lab of one proxy's ServiceScale environments: the runner keeps
// it up between their stages (runner.go, sharedLabs) when they run one after the other,
// in growing counts, so the Services of the smaller counts are created once and the lab
// comes up once.
type ServiceScaleLab struct {
	cluster *Cluster
	// What deploy put into the lab, and in which of its ups (0: none yet).
	deployedIn int
	client     Host
	clusterIP  netip.Addr
	directIP   netip.Addr          // a twin of the backend outside the Service: the direct baseline
	backends   []labdriver.Backend // the filler pods
}

// NewServiceScaleLab returns the (not yet built) lab of proxy.
func NewServiceScaleLab(proxy string) *ServiceScaleLab {
	spec := LabSpec{Nodes: 2, CNI: string(labplan.CNIMyelin), Profile: "native"}
	switch proxy {
	case ProxyMyelin:
	case ProxySockLB:
		spec.Overrides = []NodeOverride{{Name: "socklb", Nodes: []string{labplan.NodeName(1), labplan.NodeName(2)},
			Settings: map[string]string{"bpf-lb-sock": "true"}}}
	default:
		spec.KubeProxy = proxy
	}
	return &ServiceScaleLab{cluster: NewCluster(spec)}
}

// NewServiceScale returns the environment of proxy with n filler Services in lab, which
// must have been made for proxy.
func NewServiceScale(lab *ServiceScaleLab, proxy string, n int) *ServiceScale {
	return &ServiceScale{Proxy: proxy, Services: n, lab: lab}
}

func (s *ServiceScale) labCluster() *Cluster { return s.lab.cluster }

// Name implements Environment: svc-<proxy>-<services>.
func (s *ServiceScale) Name() string { return fmt.Sprintf("svc-%s-%d", s.Proxy, s.Services) }

// Available implements Environment.
func (s *ServiceScale) Available() error { return s.lab.cluster.Available() }

// Setup implements Environment: the lab, the netserver backend and its Service, the
// filler Services (written through the API as fast as the apiserver takes them), and a
// wait until the proxy on node-1 has programmed the last of them.
func (s *ServiceScale) Setup(ctx context.Context) (Endpoints, error) {
	ctx, cancel := context.WithTimeout(ctx, svcSetupLimit)
	defer cancel()
	s.held = true
	if err := s.lab.cluster.acquire(ctx); err != nil {
		return Endpoints{}, err
	}
	cs, err := labdriver.BulkClient(s.lab.cluster.Paths.Kubeconfig())
	if err != nil {
		return Endpoints{}, err
	}
	client, err := s.deployOnce(ctx, cs)
	if err != nil {
		return Endpoints{}, err
	}
	// In a lab grown from a smaller count, the first Services exist and are kept.
	if err := labdriver.CreateServicesWithEndpoints(ctx, cs, "filler", s.Services, svcFillerPort, s.lab.backends); err != nil {
		return Endpoints{}, fmt.Errorf("create %d filler Services: %w", s.Services, err)
	}
	ns, name := labdriver.BulkService("filler", s.Services-1)
	last, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Endpoints{}, err
	}
	if err := s.waitProgrammed(ctx, last.Spec.ClusterIP); err != nil {
		return Endpoints{}, err
	}
	if err := s.checkSocketLB(ctx); err != nil {
		return Endpoints{}, err
	}
	return Endpoints{Client: client, Server: client, ServerAddr: s.lab.clusterIP}, nil
}

// deployOnce deploys the lab's pods and measured Service unless this up of the lab
// already has them from a smaller count.
func (s *ServiceScale) deployOnce(ctx context.Context, cs kubernetes.Interface) (Host, error) {
	l := s.lab
	if l.deployedIn == l.cluster.ups {
		return l.client, nil
	}
	client, err := s.deploy(ctx, cs)
	if err != nil {
		return nil, err
	}
	backends, err := fillerBackends(ctx, cs, fillerReplicas)
	if err != nil {
		return nil, err
	}
	l.deployedIn, l.client, l.backends = l.cluster.ups, client, backends
	return client, nil
}

// deploy creates the client, the netserver backend with its Service and its twin for the
// direct baseline, and the filler Deployment (2 lab HTTP servers), records the Service's
// and the twin's addresses in the lab, and returns the client pod's host.
func (s *ServiceScale) deploy(ctx context.Context, cs kubernetes.Interface) (Host, error) {
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	if err := createServiceScalePods(ctx, cs, n1, n2); err != nil {
		return nil, err
	}
	bin, err := s.lab.cluster.binary()
	if err != nil {
		return nil, err
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, fillerDeployment(bin), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if s.lab.clusterIP, err = createNetserverService(ctx, cs); err != nil {
		return nil, err
	}
	client, err := s.lab.cluster.kube.waitPod(ctx, "bench-client", n1)
	if err != nil {
		return nil, err
	}
	if _, err := s.lab.cluster.kube.waitPod(ctx, "bench-netserver", n2); err != nil {
		return nil, err
	}
	direct, err := s.lab.cluster.kube.waitPod(ctx, "bench-direct", n2)
	if err != nil {
		return nil, err
	}
	s.lab.directIP = direct.IP
	host := NetNSHost{Path: client.NetNS}
	if s.Proxy == ProxySockLB {
		// Socket-LB serves the processes of node-1's cgroup: netperf runs there, as the
		// client pod's own processes would (outside it, the tc path translated).
		host.Cgroup = labplan.HostCgroup(n1)
	}
	return host, nil
}

// createServiceScalePods creates the client pod on node client, and on node server the
// netserver backend and its twin outside the Service.
func createServiceScalePods(ctx context.Context, cs kubernetes.Interface, client, server string) error {
	pods := cs.CoreV1().Pods("default")
	mk := func(name, node string, cmd ...string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name, Image: "host", Command: cmd}}}}
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	if err := mk("bench-client", client, "sleep", "infinity"); err != nil {
		return err
	}
	netserver := []string{"netserver", "-D", "-p", strconv.Itoa(svcControlPort)}
	if err := mk("bench-netserver", server, netserver...); err != nil {
		return err
	}
	// The direct baseline's server is a twin outside the Service: the client reuses its
	// ports towards each destination, so connections to the ClusterIP and straight to
	// its backend would meet the same backend socket tuples and disturb each other.
	return mk("bench-direct", server, netserver...)
}

// createNetserverService creates the measured Service (the netserver's control and data
// ports) and returns its cluster IP.
func createNetserverService(ctx context.Context, cs kubernetes.Interface) (netip.Addr, error) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bench-netserver"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "bench-netserver"},
		Ports: []corev1.ServicePort{
			{Name: "control", Port: svcControlPort, TargetPort: intstr.FromInt32(svcControlPort)},
			{Name: "data", Port: svcDataPort, TargetPort: intstr.FromInt32(svcDataPort)},
		}}}
	created, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	return netip.ParseAddr(created.Spec.ClusterIP)
}

// fillerReplicas is how many backends each filler Service has in a ServiceScale lab.
const fillerReplicas = 2

// fillerDeployment is 2 lab HTTP servers (bin lab serve), the backends of every filler
// Service.
func fillerDeployment(bin string) *appsv1.Deployment {
	replicas := int32(fillerReplicas)
	labels := map[string]string{"app": "bench-filler"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "bench-filler"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "host", Command: []string{bin, "lab", "serve", "--listen", ":" + strconv.Itoa(svcFillerPort)}}}}}}}
}

// waitProgrammed waits until node-1's proxy has programmed the last filler and the
// measured Service: myelin's agent lists both frontends; kube-proxy's rules mention both
// cluster IPs.
func (s *ServiceScale) waitProgrammed(ctx context.Context, lastIP string) error {
	want := []string{lastIP, s.lab.clusterIP.String()}
	for {
		have, err := s.programmed(ctx)
		found := 0
		for _, w := range want {
			if strings.Contains(have, w+":") || strings.Contains(have, w+" ") {
				found++
			}
		}
		if err == nil && found == len(want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the %s proxy did not program %v: %w (last error: %v)", s.Proxy, want, ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}

// programmed returns text in which every programmed cluster IP appears as "IP:" or "IP ".
func (s *ServiceScale) programmed(ctx context.Context) (string, error) {
	node := labplan.NodeName(1)
	switch s.Proxy {
	case ProxyMyelin, ProxySockLB:
		svcs, err := api.NewClient(api.NodeSocket(node)).Services(ctx)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for _, f := range svcs.Frontends {
			b.WriteString(f.Frontend + "\n")
		}
		return b.String(), nil
	// Only the chain or map that holds a rule per cluster IP: the whole table of
	// 10,000 Services costs iptables-save ~1 s of CPU and nft ~13 s per look, which
	// the proxy being waited for would lose.
	case ProxyIPTables:
		out, err := exec.CommandContext(ctx, "nsenter", "--net="+labplan.NetNSPath(node), "--", "iptables", "-t", "nat", "-S", "KUBE-SERVICES").Output()
		return strings.ReplaceAll(string(out), "/32", " "), err
	default:
		out, err := exec.CommandContext(ctx, "nsenter", "--net="+labplan.NetNSPath(node), "--", "nft", "list", "map", "ip", "kube-proxy", "service-ips").Output()
		return strings.ReplaceAll(string(out), " . ", " "), err
	}
}

// checkSocketLB makes sure the client's node serves Services as the proxy says:
// socket-LB active with ProxySockLB, so a fallback is never measured as socket-LB.
func (s *ServiceScale) checkSocketLB(ctx context.Context) error {
	if s.Proxy != ProxySockLB {
		return nil
	}
	node := labplan.NodeName(1)
	st, err := api.NewClient(api.NodeSocket(node)).Status(ctx)
	if err != nil {
		return fmt.Errorf("status of %s: %w", node, err)
	}
	if !strings.HasPrefix(st.SocketLB, "active") {
		return fmt.Errorf("%s: socket-LB is not active (%q): see myelin status", node, st.SocketLB)
	}
	return nil
}

// Teardown implements Environment.
func (s *ServiceScale) Teardown() error {
	if !s.held {
		return nil
	}
	s.held = false
	return s.lab.cluster.release()
}

// ServiceCRR is netperf TCP_CRR from the client pod to the measured Service's cluster
// IP: the connection rate through the Service proxy. Its server is the Service's
// backend, which the environment runs; netperf -T pins the backend's netserver child.
// With Direct it connects instead straight to a twin of that backend on the same node
// (a pod outside the Service): the baseline of the Service case in the same lab and
// round, so that Service counts and proxies, which run in different labs, compare as
// ratios rather than as absolute rates measured minutes apart.
type ServiceCRR struct {
	Env    *ServiceScale
	Direct bool
}

// Name implements Workload.
func (w ServiceCRR) Name() string {
	if w.Direct {
		return "direct-crr"
	}
	return "svc-crr"
}

// Describe implements Workload.
func (w ServiceCRR) Describe() string {
	if w.Direct {
		return "netperf TCP_CRR to a twin of the Service's backend, by pod IP (no Service): the baseline of svc-crr"
	}
	return fmt.Sprintf("netperf TCP_CRR to a ClusterIP Service (one backend on the other node) with %d other Services present, served by %s",
		w.Env.Services, w.Env.Proxy)
}

// Metrics implements Workload.
func (w ServiceCRR) Metrics() []Metric { return Netperf{Test: TestTCPCRR}.Metrics() }

// Tools implements ToolUser; the environment runs the backend and its twin, so it
// is no ClientServer workload.
func (w ServiceCRR) Tools() []string { return []string{"netperf", "netserver", "nsenter", "taskset"} }

// Counted implements Counted.
func (w ServiceCRR) Counted() bool { return true }

// Run implements Workload.
func (w ServiceCRR) Run(ctx context.Context, t Trial) (Sample, error) {
	addr := w.Env.lab.clusterIP
	if w.Direct {
		addr = w.Env.lab.directIP
	}
	t.Server = Target{Addr: addr, Port: svcControlPort}
	return Netperf{Test: TestTCPCRR, DataPort: svcDataPort}.Run(ctx, t)
}

// ServiceScaleCases are the Service scale cases: for myelin and kube-proxy in iptables
// and nftables mode, each count (growing) in its own stage, in one lab per proxy, both
// placements; each svc-crr case is compared to the direct-crr case of its lab and
// placement.
func ServiceScaleCases(counts []int) []Case {
	var out []Case
	for _, proxy := range []string{ProxyMyelin, ProxyIPTables, ProxyNFTables} {
		lab := NewServiceScaleLab(proxy)
		for _, n := range counts {
			env := NewServiceScale(lab, proxy, n)
			for _, p := range Placements() {
				dw, sw := ServiceCRR{Env: env, Direct: true}, ServiceCRR{Env: env}
				direct := Case{Name: CaseName(env, dw, p), Group: GroupBaseline,
					Stage: env.Name(), Env: env, Workload: dw, Placement: p}
				svc := Case{Name: CaseName(env, sw, p), Group: GroupService,
					Stage: env.Name(), Env: env, Workload: sw, Placement: p, Baseline: direct.Name}
				out = append(out, direct, svc)
			}
		}
	}
	return out
}

// SockLBCases are svc-crr and direct-crr with socket-LB (ProxySockLB) and 10 other
// Services, both placements: what a connection through a Service costs against a
// direct one when connect() is translated, in the same lab and round.
func SockLBCases() []Case {
	env := NewServiceScale(NewServiceScaleLab(ProxySockLB), ProxySockLB, 10)
	var out []Case
	for _, p := range Placements() {
		dw, sw := ServiceCRR{Env: env, Direct: true}, ServiceCRR{Env: env}
		direct := Case{Name: CaseName(env, dw, p), Group: GroupBaseline, Stage: env.Name(), Env: env, Workload: dw, Placement: p}
		out = append(out, direct, Case{Name: CaseName(env, sw, p), Group: GroupService,
			Stage: env.Name(), Env: env, Workload: sw, Placement: p, Baseline: direct.Name})
	}
	return out
}
