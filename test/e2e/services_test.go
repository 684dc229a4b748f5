package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// backendDeployment runs n lab HTTP/UDP servers (port 8080) labelled app=name, spread
// over the nodes. On SIGTERM they keep serving for 3 s, like a server with a preStop
// delay, so a scale-down loses no request while the endpoints propagate.
func backendDeployment(name string, replicas int32) *appsv1.Deployment {
	d := webDeployment(replicas)
	d.Name = name
	labels := map[string]string{"app": name}
	d.Spec.Selector.MatchLabels = labels
	d.Spec.Template.Labels = labels
	d.Spec.Template.Spec = hostPod(name, myelinBin, "lab", "serve", "--listen", ":8080", "--drain", "3s")
	d.Spec.Template.Spec.TopologySpreadConstraints = webDeployment(replicas).Spec.Template.Spec.TopologySpreadConstraints
	d.Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels = labels
	return d
}

// createService creates a Service selecting app=app with TCP and UDP port 80 -> 8080,
// changed by mut, and returns it as the apiserver filled it in (cluster IP, nodePorts).
func createService(t *testing.T, cs kubernetes.Interface, name, app string, mut func(*corev1.Service)) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			},
		},
	}
	if mut != nil {
		mut(svc)
	}
	out, err := cs.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Service %s: %v", name, err)
	}
	return out
}

// servers fetches url n times from run and counts the answers per server name; each
// answer must come from one of want (pod names) and show clientIP (when not empty).
func servers(t *testing.T, what string, run func(...string) (string, error), url string, n int, clientIP string) map[string]int {
	t.Helper()
	return serversUntil(t, what, run, url, n, clientIP, nil)
}

// allServersMax bounds serversOfAll: 64 requests miss one of 2 backends chosen at
// random with a chance of 2^-63, one of 3 with 3·(2/3)^64 ≈ 2·10^-11.
const allServersMax = 64

// serversOfAll is servers until every one of want has answered, at most
// allServersMax requests: backends are chosen at random (or by a hash of the
// connection), so a fixed handful of requests can miss one by chance (8 requests
// over 2 backends did, 1 time in 128). Pass the result to expectServers.
func serversOfAll(t *testing.T, what string, run func(...string) (string, error), url, clientIP string, want ...string) map[string]int {
	t.Helper()
	return serversUntil(t, what, run, url, allServersMax, clientIP, func(seen map[string]int) bool {
		for _, w := range want {
			if seen[w] == 0 {
				return false
			}
		}
		return true
	})
}

// serversUntil is servers stopping early once done (nil: never) says so.
func serversUntil(t *testing.T, what string, run func(...string) (string, error), url string, n int, clientIP string, done func(map[string]int) bool) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n && (done == nil || !done(seen)); i++ {
		out, err := run("curl", "-sS", "-m", "5", url)
		if err != nil {
			t.Errorf("%s: request %d to %s: %v %q", what, i, url, err, out)
			return seen
		}
		var server, client string
		if _, err := fmt.Sscanf(strings.TrimSpace(out), "server=%s client=%s", &server, &client); err != nil {
			t.Errorf("%s: unexpected answer %q", what, out)
			return seen
		}
		if clientIP != "" && client != clientIP {
			t.Errorf("%s: backend %s saw client %s, want %s", what, server, client, clientIP)
		}
		seen[server]++
	}
	return seen
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func expectServers(t *testing.T, what string, seen map[string]int, want ...string) {
	t.Helper()
	if len(seen) != len(want) {
		t.Errorf("%s: answers from %v, want every one of %v", what, seen, want)
		return
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("%s: answers from %v, want every one of %v", what, seen, want)
		}
	}
}

// servicesOf returns `myelin services -o json` of a node.
func servicesOf(t *testing.T, node string) api.Services {
	t.Helper()
	out, err := myelin("services", "--node", node, "-o", "json")
	var s api.Services
	if err != nil || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("myelin services --node %s: %v %s", node, err, out)
	}
	return s
}

// waitProgrammed waits until node's agent has programmed frontend (addr:port/PROTO)
// with n active backends.
func waitProgrammed(t *testing.T, node, frontend string, n int) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("%s programmed on %s with %d backends", frontend, node, n), func(context.Context) (bool, string) {
		s := servicesOf(t, node)
		for _, f := range s.Frontends {
			if f.Frontend != frontend {
				continue
			}
			active := 0
			for _, b := range f.Backends {
				if b.State == "active" {
					active++
				}
			}
			return active == n, fmt.Sprintf("%+v", f)
		}
		return false, "not programmed"
	})
}

// checkExternalLocal checks that node's frontend is externalTrafficPolicy Local with
// exactly the backends local (addr:port) as its outside clients' pool.
func checkExternalLocal(t *testing.T, node, frontend string, local ...string) {
	t.Helper()
	for _, f := range servicesOf(t, node).Frontends {
		if f.Frontend != frontend {
			continue
		}
		var got []string
		for _, b := range f.Backends {
			if b.Local {
				got = append(got, b.Address)
			}
		}
		if f.ExternalTrafficPolicy != "Local" || !slices.Equal(got, local) {
			t.Errorf("%s on %s: externalTrafficPolicy %q with local backends %v, want Local with %v", frontend, node, f.ExternalTrafficPolicy, got, local)
		}
		return
	}
	t.Errorf("%s not programmed on %s", frontend, node)
}

func counter(t *testing.T, node, direction, reason string) uint64 {
	t.Helper()
	for _, c := range agentStatus(t, node).Counters {
		if c.Direction == direction && c.Reason == reason {
			return c.Packets
		}
	}
	return 0
}

// TestLabMyelinServices: real Services through the Kubernetes API, served by myelin's
// BPF load balancer on a node with BPF host routing (node-1) and one with legacy host
// routing (node-2).
func TestLabMyelinServices(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createNodeConfig(t, "legacy-node-2", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"host-routing": "legacy"})
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "host-routing is legacy")

	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "client2", n2, map[string]string{"app": "client2"}, "sleep", "infinity")
	web := runningPods(t, cs, "app=web", 2)
	c1 := runningPods(t, cs, "app=client", 1)[0]
	c2 := runningPods(t, cs, "app=client2", 1)[0]
	webOn := podsOn(web)
	if len(webOn[n1]) != 1 || len(webOn[n2]) != 1 {
		t.Fatalf("web pods not spread over both nodes: %v", webOn)
	}

	svc := createService(t, cs, "web", "web", nil)
	np := createService(t, cs, "web-np", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	local := createService(t, cs, "web-local", "web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	empty := createService(t, cs, "empty", "nothing", nil)
	cip := svc.Spec.ClusterIP
	for _, n := range []string{n1, n2} {
		waitProgrammed(t, n, cip+":80/TCP", 2)
		waitProgrammed(t, n, cip+":80/UDP", 2)
		waitProgrammed(t, n, empty.Spec.ClusterIP+":80/TCP", 0)
	}
	waitProgrammed(t, n1, fmt.Sprintf("198.18.0.11:%d/TCP", np.Spec.Ports[0].NodePort), 2)
	// externalTrafficPolicy Local: every backend, the node's own marked for outside clients.
	waitProgrammed(t, n1, fmt.Sprintf("198.18.0.11:%d/TCP", local.Spec.Ports[0].NodePort), 2)
	checkExternalLocal(t, n1, fmt.Sprintf("198.18.0.11:%d/TCP", local.Spec.Ports[0].NodePort), webOn[n1][0].Status.PodIP+":8080")

	t.Run("ClusterIP TCP from both nodes", func(t *testing.T) {
		for _, c := range []corev1.Pod{c1, c2} {
			run := func(argv ...string) (string, error) { return inPod(c.Name, argv...) }
			seen := serversOfAll(t, "ClusterIP from "+c.Spec.NodeName, run, "http://"+cip+"/", c.Status.PodIP, podNames(web)...)
			expectServers(t, "ClusterIP from "+c.Spec.NodeName, seen, podNames(web)...)
		}
	})
	t.Run("ClusterIP UDP from both nodes", func(t *testing.T) {
		for _, c := range []string{"client", "client2"} {
			// Connected UDP sockets: a reply only counts when it comes from the ClusterIP.
			out, err := inPod(c, myelinBin, "lab", "udp-flows", "--to", cip+":80", "--flows", "50")
			var res labtools.UDPFlowsResult
			if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Replies != 50 {
				t.Errorf("50 UDP flows to %s:80 from %s: %v %s; want 50 replies", cip, c, err, out)
			}
		}
	})
	t.Run("hairpin: a backend reaches its own Service", func(t *testing.T) {
		for _, p := range web {
			run := func(argv ...string) (string, error) { return inPod(p.Name, argv...) }
			seen := servers(t, "hairpin from "+p.Name, run, "http://"+cip+"/", 16, "")
			if seen[p.Name] == 0 {
				t.Errorf("hairpin from %s: answers %v, want some from itself", p.Name, seen)
			}
		}
	})
	t.Run("NodePort from the external host", func(t *testing.T) {
		run := func(argv ...string) (string, error) { return inNode(labplan.ExtNS, argv...) }
		for i, node := range []string{n1, n2} {
			nodeIP := fmt.Sprintf("198.18.0.1%d", i+1)
			url := fmt.Sprintf("http://%s:%d/", nodeIP, np.Spec.Ports[0].NodePort)
			seen := serversOfAll(t, "NodePort on "+node, run, url, "", podNames(web)...)
			expectServers(t, "NodePort on "+node, seen, podNames(web)...)
			// The local backend sees the external client; the remote one the node IP.
			localWeb, remoteWeb := webOn[node][0].Name, webOn[map[string]string{n1: n2, n2: n1}[node]][0].Name
			checkClientSeen(t, run, url, localWeb, "203.0.113.10")
			checkClientSeen(t, run, url, remoteWeb, nodeIP)
		}
		// externalTrafficPolicy Local: only the node's own backend, client IP kept.
		url := fmt.Sprintf("http://198.18.0.11:%d/", local.Spec.Ports[0].NodePort)
		seen := servers(t, "NodePort Local", run, url, 8, "203.0.113.10")
		expectServers(t, "NodePort Local", seen, webOn[n1][0].Name)
	})
	t.Run("empty Service rejects at once", func(t *testing.T) {
		before := counter(t, n1, "from-pod", "DROP_SVC_NO_BACKEND")
		// bash's /dev/tcp prints the connect errno, which curl doesn't.
		out, err := inPod("client", "timeout", "10", "bash", "-c", "exec 3<>/dev/tcp/"+empty.Spec.ClusterIP+"/80")
		if err == nil || !strings.Contains(out, "Connection refused") {
			t.Errorf("connect to a Service with no backend: %v %q, want connection refused (not a timeout)", err, out)
		}
		out, err = inPod("client", myelinBin, "lab", "udp-flows", "--to", empty.Spec.ClusterIP+":80", "--flows", "1")
		var res labtools.UDPFlowsResult
		if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Refused != 1 {
			t.Errorf("UDP to a Service with no backend: %v %q, want the flow refused (ICMP port unreachable)", err, out)
		}
		if after := counter(t, n1, "from-pod", "DROP_SVC_NO_BACKEND"); after <= before {
			t.Errorf("DROP_SVC_NO_BACKEND on node-1 from-pod: %d before, %d after; want it counted", before, after)
		}
	})
	t.Run("services CLI", func(t *testing.T) {
		out, err := myelin("services", "--node", n1)
		if err != nil || !strings.Contains(out, "default/web") || !strings.Contains(out, cip+":80/TCP") ||
			!strings.Contains(out, "none: new connections are rejected") {
			t.Errorf("myelin services: %v\n%s", err, out)
		}
		if st := agentStatus(t, n1); !strings.HasPrefix(st.KubeProxy, "myelin") {
			t.Errorf("status says Services are served by %q, want myelin", st.KubeProxy)
		}
	})
	t.Run("scale down under a request loop", func(t *testing.T) {
		stop := make(chan struct{})
		done := make(chan struct{})
		var total int
		var failures []string
		go func() {
			total, failures = requestLoop("http://"+cip+"/", stop)
			close(done)
		}()
		time.Sleep(2 * time.Second)
		scale(t, cs, "web", 1)
		runningPods(t, cs, "app=web", 1)
		waitProgrammed(t, n1, cip+":80/TCP", 1)
		time.Sleep(4 * time.Second)
		close(stop)
		<-done
		if len(failures) > 0 || total == 0 {
			t.Errorf("request loop during scale-down: %d of %d failed (none made counts as failed): %v", len(failures), total, failures)
		}
		scale(t, cs, "web", 2)
		web = runningPods(t, cs, "app=web", 2)
		waitProgrammed(t, n1, cip+":80/TCP", 2)
	})
	t.Run("session affinity ClientIP", func(t *testing.T) {
		aff := createService(t, cs, "web-aff", "web", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](300)}}
		})
		waitProgrammed(t, n1, aff.Spec.ClusterIP+":80/TCP", 2)
		run := func(argv ...string) (string, error) { return inPod("client", argv...) }
		seen := servers(t, "affinity", run, "http://"+aff.Spec.ClusterIP+"/", 16, c1.Status.PodIP)
		if len(seen) != 1 {
			t.Errorf("ClientIP affinity: answers from %v, want all from one backend", seen)
		}
	})
	t.Run("lb-algorithm maglev", func(t *testing.T) {
		setConfig(t, cs, "lb-algorithm", "maglev")
		restartAgent(t, n1)
		restartAgent(t, n2)
		if s := servicesOf(t, n1); s.Algorithm != "maglev" {
			t.Fatalf("myelin services says algorithm %q, want maglev", s.Algorithm)
		}
		waitProgrammed(t, n1, cip+":80/TCP", 2)
		// Flows spread over both backends. (That a flow hashes to the same backend on
		// every node is checked by the Maglev unit tests and the datapath's packet tests.)
		run := func(argv ...string) (string, error) { return inPod("client", argv...) }
		seen := serversOfAll(t, "maglev, many flows", run, "http://"+cip+"/", c1.Status.PodIP, podNames(web)...)
		expectServers(t, "maglev, many flows", seen, podNames(web)...)
	})
	labDown(t)
}

// checkClientSeen requests url until backend answers and checks the client address it saw.
func checkClientSeen(t *testing.T, run func(...string) (string, error), url, backend, wantClient string) {
	t.Helper()
	for i := 0; i < 40; i++ {
		out, err := run("curl", "-sS", "-m", "5", url)
		if err != nil {
			continue
		}
		if strings.HasPrefix(out, "server="+backend+" ") {
			if !strings.Contains(out, "client="+wantClient+"\n") {
				t.Errorf("%s via %s: %q, want client=%s", backend, url, out, wantClient)
			}
			return
		}
	}
	t.Errorf("%s never answered via %s", backend, url)
}

func scale(t *testing.T, cs kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	s, err := cs.AppsV1().Deployments("default").GetScale(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := cs.AppsV1().Deployments("default").UpdateScale(context.Background(), name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
