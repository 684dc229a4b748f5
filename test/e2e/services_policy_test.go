package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// TestLabMyelinServicePolicies covers what docs/operations.md promises for Services and
// no other test checked: internalTrafficPolicy Local, UDP NodePort, externalTraffic-
// Policy Local on a node without a local backend, ClientIP affinity expiring, an open
// connection to a backend that is terminating, and `myelin monitor --type trace`.
func TestLabMyelinServicePolicies(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	web := runningPods(t, cs, "app=web", 2)
	client := runningPods(t, cs, "app=client", 1)[0]
	webOn := podsOn(web)
	if len(webOn[n1]) != 1 || len(webOn[n2]) != 1 {
		t.Fatalf("web pods not spread over both nodes: %v", webOn)
	}
	run := func(argv ...string) (string, error) { return inPod("client", argv...) }
	ext := func(argv ...string) (string, error) { return inNode(labplan.ExtNS, argv...) }

	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		svc := createService(t, cs, "web-itp", "web", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		})
		waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
		seen := servers(t, "ITP Local", run, "http://"+svc.Spec.ClusterIP+"/", 16, client.Status.PodIP)
		expectServers(t, "ITP Local from "+n1, seen, webOn[n1][0].Name)
	})
	t.Run("UDP NodePort from the external host", func(t *testing.T) {
		np := createService(t, cs, "web-udp-np", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		port := np.Spec.Ports[1].NodePort // the UDP port
		for i, node := range []string{n1, n2} {
			addr := fmt.Sprintf("198.18.0.1%d:%d", i+1, port)
			waitProgrammed(t, node, addr+"/UDP", 2)
			out, err := ext(myelinBin, "lab", "udp-flows", "--to", addr, "--flows", "20")
			var res labtools.UDPFlowsResult
			if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Replies != 20 {
				t.Errorf("20 UDP flows to NodePort %s: %v %s; want 20 replies", addr, err, out)
			}
		}
	})
	t.Run("externalTrafficPolicy Local on a node without a local backend", func(t *testing.T) {
		createPod(t, cs, "solo", n1, map[string]string{"app": "solo"}, myelinBin, "lab", "serve", "--listen", ":8080")
		runningPods(t, cs, "app=solo", 1)
		svc := createService(t, cs, "solo-local", "solo", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		port := svc.Spec.Ports[0].NodePort
		waitProgrammed(t, n1, fmt.Sprintf("198.18.0.11:%d/TCP", port), 1)
		// n2 has the one (remote) backend for its own clients, none for outside ones.
		waitProgrammed(t, n2, fmt.Sprintf("198.18.0.12:%d/TCP", port), 1)
		checkExternalLocal(t, n2, fmt.Sprintf("198.18.0.12:%d/TCP", port))
		seen := servers(t, "ETP Local on the backend's node", ext, fmt.Sprintf("http://198.18.0.11:%d/", port), 4, "203.0.113.10")
		expectServers(t, "ETP Local on the backend's node", seen, "solo")
		before := counter(t, n2, "from-netdev", "DROP_SVC_NO_BACKEND")
		if out, err := ext("curl", "-sS", "-m", "5", fmt.Sprintf("http://198.18.0.12:%d/", port)); err == nil {
			t.Errorf("ETP Local NodePort on %s, which has no local backend, answered %q; want it refused", n2, out)
		}
		if after := counter(t, n2, "from-netdev", "DROP_SVC_NO_BACKEND"); after <= before {
			t.Errorf("DROP_SVC_NO_BACKEND on %s from-netdev: %d before, %d after; want it counted", n2, before, after)
		}
		// A pod of n2 is n2's own client: like kube-proxy, it gets any endpoint.
		onN2 := func(argv ...string) (string, error) { return inPod(webOn[n2][0].Name, argv...) }
		seen = servers(t, "ETP Local from a pod of "+n2, onN2, fmt.Sprintf("http://198.18.0.12:%d/", port), 4, webOn[n2][0].Status.PodIP)
		expectServers(t, "ETP Local from a pod of "+n2, seen, "solo")
	})
	t.Run("ClientIP affinity expires", func(t *testing.T) { checkAffinityExpiry(t, cs, n1, run, podNames(web)) })
	t.Run("open connection to a terminating backend", func(t *testing.T) { checkTerminatingBackend(t, cs, n1, n2) })
	t.Run("monitor --type trace", func(t *testing.T) { checkTraceMonitor(t, n1, webOn[n2][0].Status.PodIP) })
	labDown(t)
}

// checkAffinityExpiry: with a 2 s affinity timeout a client sticks to one backend while
// it keeps coming back within the timeout, and after each pause longer than the timeout
// it selects afresh: over ten pauses both backends answer (all ten picking the same
// one by chance has probability 2^-10).
func checkAffinityExpiry(t *testing.T, cs kubernetes.Interface, node string, run func(...string) (string, error), backends []string) {
	svc := createService(t, cs, "web-aff-expiry", "web", func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](2)}}
	})
	waitProgrammed(t, node, svc.Spec.ClusterIP+":80/TCP", 2)
	url := "http://" + svc.Spec.ClusterIP + "/"
	if seen := servers(t, "within the affinity timeout", run, url, 8, ""); len(seen) != 1 {
		t.Errorf("requests within the affinity timeout went to %v, want one backend", seen)
	}
	after := map[string]int{}
	for i := 0; i < 10; i++ {
		time.Sleep(3 * time.Second) // longer than the timeout: the entry has expired
		for name, n := range servers(t, "after the timeout", run, url, 1, "") {
			after[name] += n
		}
	}
	expectServers(t, "first requests after each expiry", after, backends...)
}

// checkTerminatingBackend: a client holds a keep-alive connection through a ClusterIP to
// the backend "drain"; a second backend "stay" joins; drain is deleted and drains (the
// lab kubelet gives it at most 10 s). The Service then lists drain as terminating and
// stay as active: a request on the open connection is still answered by drain, and new
// connections all go to stay.
func checkTerminatingBackend(t *testing.T, cs kubernetes.Interface, clientNode, serverNode string) {
	labels := map[string]string{"app": "drainset"}
	createPod(t, cs, "drain", serverNode, labels, myelinBin, "lab", "serve", "--listen", ":8080", "--drain", "20s")
	runningPods(t, cs, "app=drainset", 1)
	svc := createService(t, cs, "drainset", "drainset", nil)
	frontend := svc.Spec.ClusterIP + ":80/TCP"
	waitProgrammed(t, clientNode, frontend, 1)

	// The pods run host programs: the file tells the client when to send its second request.
	next := filepath.Join(t.TempDir(), "next")
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/80 || exit 1
req() { printf 'GET / HTTP/1.1\r\nHost: drain\r\n\r\n' >&3; while IFS= read -r -t 10 line <&3; do case "$line" in server=*) echo "$line"; return 0;; esac; done; return 1; }
req || exit 2
while [ ! -e %s ]; do sleep 0.1; done
req || exit 3`, svc.Spec.ClusterIP, next)
	var out lockedBuffer
	cmd := exec.Command(myelinBin, "lab", "exec", "client", "--", "timeout", "60", "bash", "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "first answer on the kept-alive connection", func(context.Context) (bool, string) {
		return strings.Count(out.String(), "server=drain ") == 1, out.String()
	})
	createPod(t, cs, "stay", clientNode, labels, myelinBin, "lab", "serve", "--listen", ":8080")
	runningPods(t, cs, "app=drainset", 2)
	waitProgrammed(t, clientNode, frontend, 2)
	if err := cs.CoreV1().Pods("default").Delete(context.Background(), "drain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 8*time.Second, "drain listed as terminating, stay as active", func(context.Context) (bool, string) {
		for _, f := range servicesOf(t, clientNode).Frontends {
			if f.Frontend == frontend {
				states := map[string]int{}
				for _, b := range f.Backends {
					states[b.State]++
				}
				return states["terminating"] == 1 && states["active"] == 1, fmt.Sprintf("%+v", f.Backends)
			}
		}
		return false, "frontend gone"
	})
	if err := os.WriteFile(next, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil || strings.Count(out.String(), "server=drain ") != 2 {
		t.Errorf("requests on a connection to a terminating backend: %v\n%s\nwant two answers from drain", err, out.String())
	}
	run := func(argv ...string) (string, error) { return inPod("client", argv...) }
	expectServers(t, "new connections while drain terminates", servers(t, "new connections", run, "http://"+svc.Spec.ClusterIP+"/", 8, ""), "stay")
}

// checkTraceMonitor: `myelin monitor --type trace` shows the forwarded packets of a ping
// from the client pod while it runs.
func checkTraceMonitor(t *testing.T, node, target string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	mon := exec.CommandContext(ctx, myelinBin, "monitor", "--node", node, "--type", "trace")
	mon.Stdout, mon.Stderr = &out, &out
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	want := "-> " + target
	eventually(t, 30*time.Second, "a trace event of the ping to "+target, func(context.Context) (bool, string) {
		_, _ = inPod("client", "ping", "-c", "1", "-W", "1", target)
		return strings.Contains(out.String(), want) && strings.Contains(out.String(), " trace "), lastLines(out.String(), 3)
	})
	cancel()
	_ = mon.Wait()
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(line, " drop ") {
			t.Errorf("monitor --type trace printed a drop event: %s", line)
		}
	}
}

// lockedBuffer collects a running command's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
