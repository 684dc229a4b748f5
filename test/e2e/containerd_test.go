package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/testenv"
)

// rootSysctls are the root netns's sysctls a real kubelet or containerd could change:
// the machine-wide ones the kubelet sets at start, and forwarding and filtering of the
// root netns.
var rootSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/all/rp_filter",
	"net/ipv4/conf/default/rp_filter", "net/ipv4/conf/all/route_localnet",
}

func readRootSysctls(t *testing.T) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for _, k := range rootSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			t.Fatalf("read sysctl %s: %v", k, err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	return vals
}

// TestLabContainerd runs real nodes (kubelet + containerd + runc) with the myelin CNI:
// pods from the locally built test image talk same-node, cross-node and through a
// ClusterIP Service; kubectl exec and logs work; the root netns's sysctls are as they
// were. Then the supervisor is killed (-9) with containers running, and lab down must
// still leave nothing behind (labUp's cleanup checks).
func TestLabContainerd(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	version := buildTestImages(t)
	before := readRootSysctls(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "myelin", "--nodes", "2")
	if out, _ := myelin("lab", "status"); !strings.Contains(out, "--runtime containerd") {
		t.Errorf("lab status does not name the runtime:\n%s", out)
	}
	if after := readRootSysctls(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("root netns sysctls changed by lab up:\nbefore %v\nafter  %v", before, after)
	}

	image := images.Ref(images.Test, version)
	serve := []string{"myelin", "lab", "serve", "--listen", ":8080", "--name", "srv"}
	idle := []string{"sh", "-c", "echo hello-from-the-container; exec sleep 3600"}
	containerPod(t, cs, "srv", "myelin-node-1", image, map[string]string{"app": "srv"}, serve...)
	containerPod(t, cs, "near", "myelin-node-1", image, nil, idle...)
	containerPod(t, cs, "far", "myelin-node-2", image, nil, idle...)
	svc := createService(t, cs, "srv", "srv", nil)
	pods := waitContainersRunning(t, cs, "srv", "near", "far")

	for _, from := range []string{"near", "far"} {
		for _, target := range []string{pods["srv"].Status.PodIP, svc.Spec.ClusterIP} {
			port := "8080"
			if target == svc.Spec.ClusterIP {
				port = "80"
			}
			out, err := kubectl("exec", from, "--", "sh", "-c",
				fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %s`, target, port))
			want := "server=srv client=" + pods[from].Status.PodIP
			if err != nil || !strings.Contains(out, want) {
				t.Errorf("kubectl exec %s -- nc %s %s: %v %q, want %q", from, target, port, err, out, want)
			}
		}
	}
	if out, err := kubectl("logs", "far"); err != nil || !strings.Contains(out, "hello-from-the-container") {
		t.Errorf("kubectl logs far: %v %q, want the container's output", err, out)
	}
	if after := readRootSysctls(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("root netns sysctls changed while pods ran:\nbefore %v\nafter  %v", before, after)
	}
	killSupervisor(t)
}

// requireContainerd needs containerd, runc and the lab's kubelet (make setup builds
// them); in CI their absence fails the test.
func requireContainerd(t *testing.T) {
	t.Helper()
	testenv.RequireTools(t, "containerd", "containerd-shim-runc-v2", "runc", "ctr")
	if _, err := os.Stat(filepath.Join(lab.KubeBinDir(), "kubelet")); err != nil {
		testenv.Skipf(t, "needs kubelet %s (make setup builds it): %v", lab.KubeVersion, err)
	}
	if _, err := os.Stat(images.AgentBase(cni.ToolCache())); err != nil {
		testenv.Skipf(t, "needs the agent image's base (make setup builds it): %v", err)
	}
}

// buildTestImages builds the images from the binaries under test (tagged with their
// version, rebuilt every run so they hold exactly these binaries) and returns the tag.
func buildTestImages(t *testing.T) string {
	t.Helper()
	version, err := myelin("version")
	if err != nil {
		t.Fatalf("myelin version: %v %s", err, version)
	}
	if out, err := myelin("images", "build", "--force"); err != nil {
		t.Fatalf("myelin images build: %v\n%s", err, out)
	}
	return strings.TrimSpace(version)
}

func containerPod(t *testing.T, cs kubernetes.Interface, name, node, image string, labels map[string]string, command ...string) {
	t.Helper()
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: name, Image: image, Command: command, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// waitContainersRunning waits until each named pod's container runs and has an IP.
func waitContainersRunning(t *testing.T, cs kubernetes.Interface, names ...string) map[string]corev1.Pod {
	t.Helper()
	pods := map[string]corev1.Pod{}
	eventually(t, 2*time.Minute, "pods running", func(ctx context.Context) (bool, string) {
		for _, n := range names {
			p, err := cs.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return false, fmt.Sprintf("%s: %s %s", n, p.Status.Phase, podWaiting(p))
			}
			pods[n] = *p
		}
		return true, ""
	})
	return pods
}

func podWaiting(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil {
			return c.State.Waiting.Reason + ": " + c.State.Waiting.Message
		}
	}
	return ""
}

// kubectl runs the lab's kubectl against the lab.
func kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(lab.KubeBinDir(), "kubectl"), append([]string{"--kubeconfig", paths.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// killSupervisor kills the lab's supervisor with SIGKILL: its children die with it
// (Pdeathsig), the containers and their shims don't.
func killSupervisor(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(paths.SupervisorPID())
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the supervisor %d: %v", pid, err)
	}
	for lab.Running(paths) {
		time.Sleep(100 * time.Millisecond)
	}
}

// runtimeLeftovers lists what a containerd lab could leave outside its directory:
// mounts under it, node cgroups, container log links into it, and shim sockets (any,
// when no containerd runs outside the lab, which the lab's e2e tests need anyway).
func runtimeLeftovers() []string {
	var out []string
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		out = append(out, "unknown: read mountinfo: "+err.Error())
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], paths.Dir) {
			out = append(out, "mount "+f[4])
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/myelin-*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/myelin-*")
	cgroups = append(cgroups, v2...)
	for _, c := range cgroups {
		out = append(out, "cgroup "+c)
	}
	logs, _ := os.ReadDir("/var/log/containers")
	for _, e := range logs {
		if target, err := os.Readlink(filepath.Join("/var/log/containers", e.Name())); err == nil && strings.HasPrefix(target, paths.Dir) {
			out = append(out, "container log link "+e.Name())
		}
	}
	for _, f := range lab.LeftoverCNIResults() {
		out = append(out, "cached CNI result "+f)
	}
	if exec.Command("pgrep", "-x", "kubelet").Run() != nil {
		if _, err := os.Stat("/var/lib/kubelet/device-plugins/kubelet.sock"); err == nil {
			out = append(out, "path /var/lib/kubelet/device-plugins/kubelet.sock (no kubelet runs)")
		}
	}
	if err := exec.Command("pgrep", "-x", "containerd").Run(); err != nil {
		socks, _ := os.ReadDir("/run/containerd/s")
		for _, s := range socks {
			out = append(out, "shim socket /run/containerd/s/"+s.Name())
		}
	}
	return out
}
