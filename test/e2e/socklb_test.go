package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// TestLabSocketLB: with bpf-lb-sock on, each agent attaches socket-LB to its node's
// own cgroup (status says so); a pod's TCP, connected and unconnected UDP to a
// ClusterIP reach a backend while the socket shows the ClusterIP as its peer, and
// their flows name the Service; a
// process in the node's host network reaches the ClusterIP too; ClientIP affinity
// keeps a client on one backend; with Maglev one client's connections spread; a NodePort
// with externalTrafficPolicy Local on the client's node answers the node's own pods and
// processes from every backend (kube-proxy's short-circuit; outside clients get the
// node's own, TestLabMyelinServices). Turned off again, status says the tc path serves
// Services and they still work; a UDP socket socket-LB connected to a backend removed
// while it was off is closed once it is back on (the agent's sweep at start).
func TestLabSocketLB(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	setConfig(t, cs, "bpf-lb-sock", "true")
	for _, n := range []string{n1, n2} {
		restartAgent(t, n)
		if st := agentStatus(t, n).SocketLB; !strings.HasPrefix(st, "active on cgroup "+labplan.Cgroup2Dir(n)+":") {
			t.Fatalf("%s: socket-LB status %q, want active on the node's cgroup %s", n, st, labplan.Cgroup2Dir(n))
		}
	}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host-client"}, Spec: hostPod("host-client", "sleep", "infinity")}
	host.Spec.HostNetwork, host.Spec.NodeName = true, n1
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), host, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := runningPods(t, cs, "app=web", 2)
	runningPods(t, cs, "app=client", 1)
	webOn := podsOn(web)
	if len(webOn[n1]) != 1 || len(webOn[n2]) != 1 {
		t.Fatalf("web pods not spread over both nodes: %v", webOn)
	}
	cip := createService(t, cs, "web", "web", nil).Spec.ClusterIP
	aff := createService(t, cs, "web-aff", "web", func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}).Spec.ClusterIP
	local := createService(t, cs, "web-local", "web", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	localFE := fmt.Sprintf("198.18.0.11:%d", local.Spec.Ports[0].NodePort)
	waitProgrammed(t, n1, cip+":80/TCP", 2)
	waitProgrammed(t, n1, cip+":80/UDP", 2)
	waitProgrammed(t, n1, aff+":80/TCP", 2)
	waitProgrammed(t, n1, localFE+"/TCP", 2)

	for _, proto := range []string{"tcp", "udp-connected", "udp"} {
		for _, client := range []string{"client", "host-client"} {
			r := peer(t, client, cip+":80", proto)
			if r.Peer != cip+":80" || !strings.HasPrefix(r.Answer, "server=web-") {
				t.Errorf("%s %s to %s:80: peer %s, answer %q; want peer %s:80 and a web pod's answer", client, proto, cip, r.Peer, r.Answer, cip)
			}
		}
	}
	t.Run("flows name the Service", func(t *testing.T) {
		// tc saw these connections already translated: their records find the
		// Service through the socket socket-LB translated.
		for _, proto := range []string{"tcp", "udp"} {
			expectFlow(t, "client's "+proto+" through socket-LB", []string{"--to-service", "default/web", "--from-pod", "client", "--protocol", proto},
				func(f *flow.Flow) bool {
					return f.Node == n1 && strings.HasPrefix(f.Destination.Pod, "web-") && (f.TCPFlags == nil || f.TCPFlags.SYN && !f.TCPFlags.ACK)
				})
		}
	})
	t.Run("affinity", func(t *testing.T) {
		seen := map[string]int{}
		for range 10 {
			seen[serverOf(peer(t, "client", aff+":80", "tcp").Answer)]++
		}
		if len(seen) != 1 {
			t.Errorf("ClientIP affinity: answers from %v, want one backend", seen)
		}
	})
	t.Run("lb-algorithm maglev", func(t *testing.T) {
		// One client's connections spread over the backends: the hash takes the
		// socket, not only the client's network namespace.
		setConfig(t, cs, "lb-algorithm", "maglev")
		restartAgent(t, n1)
		waitProgrammed(t, n1, cip+":80/TCP", 2)
		for _, client := range []string{"client", "host-client"} {
			seen := map[string]int{}
			for range 16 {
				seen[serverOf(peer(t, client, cip+":80", "tcp").Answer)]++
			}
			for _, w := range web {
				if seen[w.Name] == 0 {
					t.Errorf("maglev from %s: answers from %v, none from %s", client, seen, w.Name)
				}
			}
		}
		setConfig(t, cs, "lb-algorithm", "random")
		restartAgent(t, n1)
		waitProgrammed(t, n1, cip+":80/TCP", 2)
	})
	t.Run("externalTrafficPolicy Local from the node's own clients", func(t *testing.T) {
		// 16 random picks of 2 miss one with probability 2^-15.
		for _, client := range []string{"client", "host-client"} {
			seen := map[string]int{}
			for range 16 {
				seen[serverOf(peer(t, client, localFE, "tcp").Answer)]++
			}
			for _, w := range web {
				if seen[w.Name] == 0 {
					t.Errorf("NodePort %s (Local) from %s on %s: answers %v, none from %s: the node's own clients get every backend", localFE, client, n1, seen, w.Name)
				}
			}
		}
	})
	t.Run("UDP socket to a removed backend is closed", func(t *testing.T) {
		udpClosedOnBackendRemoval(t, cs, cip+":80")
	})
	t.Run("off again, then on: a UDP socket to a backend removed meanwhile is closed", func(t *testing.T) {
		// Socket-LB connected this socket; with it off nobody closes sockets, so
		// the one to a backend removed meanwhile stays until it is back on: the
		// agent's sweep after its first Service sync closes it.
		p := startUntilClosed(t, cip+":80")
		setConfig(t, cs, "bpf-lb-sock", "false")
		restartAgent(t, n1)
		if st := agentStatus(t, n1).SocketLB; !strings.HasPrefix(st, "off (bpf-lb-sock is false)") {
			t.Errorf("%s: socket-LB status %q after bpf-lb-sock false, want off", n1, st)
		}
		if r := peer(t, "client", cip+":80", "tcp"); !strings.HasPrefix(r.Answer, "server=web-") {
			t.Errorf("ClusterIP through the tc path: answer %q", r.Answer)
		}
		deletePodAndWait(t, cs, p.server)
		select {
		case <-p.done:
			t.Fatalf("the UDP socket to %s ended while socket-LB was off: %s", p.server, p.last)
		default:
		}
		setConfig(t, cs, "bpf-lb-sock", "true")
		restartAgent(t, n1)
		p.expectAborted(t)
	})
}

// untilClosed is a `lab peer --until-closed` running in the client pod: the backend
// (server) its connected UDP socket reached, and its last line once done is closed.
type untilClosed struct {
	addr, server string
	cmd          *exec.Cmd
	stderr       *strings.Builder
	done         chan struct{}
	last         string
}

// startUntilClosed keeps a connected UDP socket from the client pod to the Service at
// addr (at most 4 minutes) and returns once it had its first answer.
func startUntilClosed(t *testing.T, addr string) *untilClosed {
	t.Helper()
	cmd := exec.Command(myelinBin, "lab", "exec", "client", "--", myelinBin, "lab", "peer", "--to", addr,
		"--proto", "udp-connected", "--until-closed", "4m")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &untilClosed{addr: addr, cmd: cmd, stderr: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		_ = cmd.Wait()
		t.Fatalf("lab peer --until-closed printed nothing: %s", p.stderr.String())
	}
	first := sc.Text() // "answered peer=IP:PORT server=NAME client=..."
	p.server = serverOf(first[strings.Index(first, "server="):])
	go func() {
		for sc.Scan() {
			p.last = sc.Text()
		}
		close(p.done)
	}()
	return p
}

// expectAborted waits for the peer to end and expects its socket closed under it
// (ECONNABORTED), as socket-LB closes sockets to a backend that went away.
func (p *untilClosed) expectAborted(t *testing.T) {
	t.Helper()
	<-p.done
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the UDP socket to %s (backend %s, removed) stayed open: %v: %s %s", p.addr, p.server, err, p.last, p.stderr.String())
	}
	var r labtools.PeerResult
	if err := json.Unmarshal([]byte(p.last), &r); err != nil || r.Closed != "connection aborted" {
		t.Errorf("after removing backend %s: %q (%v), want the socket closed with ECONNABORTED", p.server, p.last, err)
	}
}

// deletePodAndWait deletes pod default/name and waits until it is gone.
func deletePodAndWait(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, "pod "+name+" gone", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// peer runs `myelin lab peer` in pod to addr over proto.
func peer(t *testing.T, pod, addr, proto string) labtools.PeerResult {
	t.Helper()
	out, err := inPod(pod, myelinBin, "lab", "peer", "--to", addr, "--proto", proto)
	var r labtools.PeerResult
	if err != nil {
		t.Errorf("%s: lab peer %s %s: %v: %s", pod, proto, addr, err, out)
		return r
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
		t.Errorf("%s: lab peer output %q: %v", pod, out, err)
	}
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// serverOf is NAME of an answer "server=NAME client=...".
func serverOf(answer string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(answer, "server="), " ")
	return name
}

// udpClosedOnBackendRemoval keeps a connected UDP socket from the client pod to the
// Service at addr, deletes the web pod it reached and expects the socket closed under
// the client (ECONNABORTED) once the agent removed that backend.
func udpClosedOnBackendRemoval(t *testing.T, cs kubernetes.Interface, addr string) {
	t.Helper()
	p := startUntilClosed(t, addr)
	if err := cs.CoreV1().Pods("default").Delete(context.Background(), p.server, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete backend pod %s: %v", p.server, err)
	}
	p.expectAborted(t)
}
