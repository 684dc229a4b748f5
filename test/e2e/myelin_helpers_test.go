package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
	"github.com/myelin-net/myelin/internal/logtail"
)

// driver connects to the running lab.
func driver(t *testing.T) *labdriver.Driver {
	t.Helper()
	d, err := labdriver.New(paths)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// agentStatus asks a lab node's agent for its status.
func agentStatus(t *testing.T, node string) api.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := labdriver.AgentStatus(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// processPID returns the pid of a supervised lab process, 0 if it is not running.
func processPID(t *testing.T, name string) int {
	t.Helper()
	pid, err := labdriver.ProcessPID(paths, name)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// killAgent SIGKILLs a node's agent. With hold, the supervisor keeps it down until
// releaseAgent; without, it is restarted and killAgent waits for the new one.
func killAgent(t *testing.T, node string, hold bool) {
	t.Helper()
	name := labmyelin.AgentProcess(node)
	if hold {
		if err := os.MkdirAll(filepath.Dir(paths.Hold(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths.Hold(name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pid := processPID(t, name)
	if pid == 0 {
		t.Fatalf("%s is not running", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, name+" killed", func(context.Context) (bool, string) {
		now := processPID(t, name)
		return now != pid, fmt.Sprintf("pid %d", now)
	})
	if !hold {
		waitAgentReady(t, node)
	}
}

// signalAgent sends SIGTERM to a node's agent and returns at once; the supervisor
// restarts it (for a test that expects the restarted agent to refuse to start).
func signalAgent(t *testing.T, node string) {
	t.Helper()
	if pid := processPID(t, labmyelin.AgentProcess(node)); pid == 0 || syscall.Kill(pid, syscall.SIGTERM) != nil {
		t.Fatalf("cannot signal the agent of %s (pid %d)", node, pid)
	}
}

func releaseAgent(t *testing.T, node string) {
	t.Helper()
	if err := os.Remove(paths.Hold(labmyelin.AgentProcess(node))); err != nil {
		t.Fatal(err)
	}
	waitAgentReady(t, node)
}

func waitAgentReady(t *testing.T, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := labdriver.WaitAgentReady(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// inPod runs a command in a pod's netns through myelin lab exec.
func inPod(pod string, argv ...string) (string, error) {
	return myelin(append([]string{"lab", "exec", pod, "--"}, argv...)...)
}

// podNetNS is the path of a lab pod's network namespace.
func podNetNS(p corev1.Pod) string { return labplan.NetNSPath(labplan.PodNetNS(string(p.UID))) }

// inNode runs a command in a node's netns.
func inNode(node string, argv ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + labplan.NetNSPath(node), "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// createPod creates a host-command pod, optionally pinned to a node.
func createPod(t *testing.T, cs kubernetes.Interface, name, node string, labels map[string]string, command ...string) {
	t.Helper()
	spec := hostPod(name, command...)
	spec.NodeName = node
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serverDaemonSet runs an HTTP server (TCP 8080) on every node.
func serverDaemonSet(name string, command ...string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: hostPod(name, command...)},
		},
	}
}

// checkICMP pings target from a pod (or, with node set, from a node) and fails the test
// when no reply comes back.
func checkPing(t *testing.T, from string, run func(...string) (string, error), target string) {
	t.Helper()
	out, err := run("ping", "-c", "2", "-i", "0.2", "-W", "2", target)
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping %s from %s: %v\n%s", target, from, err, out)
	}
}

// checkUDP runs a sockperf UDP ping-pong against a sockperf server and fails unless
// replies came back.
func checkUDP(t *testing.T, from string, run func(...string) (string, error), target string) {
	t.Helper()
	out, err := run("sockperf", "ping-pong", "-i", target, "-p", "11111", "-t", "1")
	if err != nil || !strings.Contains(out, "percentile 50.000") || strings.Contains(out, "No messages were received") {
		t.Errorf("UDP (sockperf) to %s from %s: %v\n%s", target, from, err, lastLines(out, 4))
	}
}

// checkTCP fetches the lab HTTP server at target:8080 and checks who answered.
func checkTCP(t *testing.T, from string, run func(...string) (string, error), target, wantServer string) {
	t.Helper()
	out, err := run("curl", "-sS", "-m", "5", "http://"+target+":8080/")
	if err != nil || !strings.HasPrefix(out, "server="+wantServer+" ") {
		t.Errorf("TCP (curl) to %s from %s: %v %q, want an answer from %s", target, from, err, out, wantServer)
	}
}

// lastLines is the end of a log or a command's output, for a failure message.
func lastLines(s string, n int) string { return strings.Join(logtail.Lines(s, n), "\n") }

func podsOn(pods []corev1.Pod) map[string][]corev1.Pod {
	out := map[string][]corev1.Pod{}
	for _, p := range pods {
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
	}
	return out
}

func execCommand(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}
