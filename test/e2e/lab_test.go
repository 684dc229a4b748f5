package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni/bridge"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
)

const podTimeout = 2 * time.Minute

func hostPod(name string, command ...string) corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "host", Command: command}}}
}

func webDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	spec := hostPod("web", myelinBin, "lab", "serve", "--listen", ":8080")
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// runningPods waits until n Pods matching selector are Running with an IP.
func runningPods(t *testing.T, cs kubernetes.Interface, selector string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, podTimeout, fmt.Sprintf("%d pods %q running", n, selector), func(ctx context.Context) (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		pods = pods[:0]
		var states []string
		for _, p := range list.Items {
			states = append(states, fmt.Sprintf("%s=%s/%s", p.Name, p.Status.Phase, p.Status.PodIP))
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		return len(pods) == n && len(list.Items) == n, strings.Join(states, " ")
	})
	return pods
}

// TestLabBridgeCNI is the foundation's end-to-end test: a 2-node lab on Debian's
// reference plugins, HTTP servers spread over both nodes, a client reaching each of
// them on the same node and across nodes, and a deletion that releases the pod's IP.
func TestLabBridgeCNI(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "bridge")
	ctx := context.Background()

	out, err := myelin("lab", "up", "--nodes", "2", "--cni", "bridge")
	if err != nil || !strings.Contains(out, "already running") {
		t.Errorf("lab up with the running lab's options: %v\n%s; want it to say so and succeed", err, out)
	}
	out, err = myelin("lab", "up", "--nodes", "3")
	if err == nil || !strings.Contains(out, "already running (--nodes 2 --cni bridge") || !strings.Contains(out, "myelin lab down first") {
		t.Errorf("lab up with other options on a running lab: %v\n%s; want a refusal naming the running lab and the fix", err, out)
	}
	// --new (myelin bench) refuses any running lab, with the status that says nothing
	// was built: the caller must not take down a lab that is not its own.
	out, err = myelin("lab", "up", "--new", "--nodes", "2", "--cni", "bridge")
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != lab.ExitRefused || !strings.Contains(out, "--new asks for one of its own") {
		t.Errorf("lab up --new on a running lab: %v\n%s; want exit status %d and the reason", err, out, lab.ExitRefused)
	}
	if len(lab.LeftoverNetNS()) != 3+2 { // myelin-lab-{net,ext,cp} and the two nodes
		t.Errorf("lab up on a running lab changed the namespaces: %v", lab.LeftoverNetNS())
	}
	// The root netns's one lab link takes no IPv6 (no router advertisement from a pod
	// can give the machine a default route through the lab).
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + labplan.ControlPlaneLink + "/disable_ipv6")
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s disable_ipv6 = %q (%v), want 1", labplan.ControlPlaneLink, b, err)
		}
	}
	// Nor does the machine forward what the lab sends to it, even where ip_forward is 1.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + labplan.ControlPlaneLink + "/forwarding"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("%s forwarding = %q (%v), want 0", labplan.ControlPlaneLink, b, err)
	}

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podCIDR := map[string]netip.Prefix{}
	for _, n := range nodes.Items {
		podCIDR[n.Name] = netip.MustParsePrefix(n.Spec.PodCIDR)
	}
	if len(podCIDR) != 2 || !netip.MustParsePrefix("10.244.0.0/16").Contains(podCIDR[labplan.NodeName(1)].Addr()) {
		t.Fatalf("node PodCIDRs = %v, want a /24 of 10.244.0.0/16 for each of 2 nodes", podCIDR)
	}

	if _, err := cs.AppsV1().Deployments("default").Create(ctx, webDeployment(2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client", Labels: map[string]string{"app": "client"}},
		Spec: hostPod("client", "sleep", "infinity")}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := runningPods(t, cs, "app=web", 2)
	cl := runningPods(t, cs, "app=client", 1)[0]

	var sameNode, crossNode int
	for _, p := range append(web, cl) {
		ip := netip.MustParseAddr(p.Status.PodIP)
		if !podCIDR[p.Spec.NodeName].Contains(ip) {
			t.Errorf("pod %s on %s has IP %v outside its node's PodCIDR %v", p.Name, p.Spec.NodeName, ip, podCIDR[p.Spec.NodeName])
		}
	}
	for _, p := range web {
		if p.Spec.NodeName == cl.Spec.NodeName {
			sameNode++
		} else {
			crossNode++
		}
		checkHTTP(t, cl.Name, p)
	}
	if sameNode != 1 || crossNode != 1 {
		t.Errorf("servers on the client's node: %d, on the other: %d; want one of each", sameNode, crossNode)
	}

	// Delete the cross-node server: CNI DEL must release its IP and remove its netns,
	// and the ReplicaSet's replacement must come up on the freed node.
	var victim corev1.Pod
	for _, p := range web {
		if p.Spec.NodeName != cl.Spec.NodeName {
			victim = p
		}
	}
	lease := filepath.Join(paths.IPAMDir(victim.Spec.NodeName), bridge.NetworkName, victim.Status.PodIP)
	netnsPath := labplan.NetNSPath(labplan.PodNetNS(string(victim.UID)))
	for _, path := range []string{lease, netnsPath} {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("before delete: %v", err)
		}
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, podTimeout, "deleted pod gone from the API", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for _, path := range []string{lease, netnsPath} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("after delete, %s still exists (CNI DEL did not run or did not release it)", path)
		}
	}
	for _, p := range runningPods(t, cs, "app=web", 2) {
		checkHTTP(t, cl.Name, p)
	}

	labDown(t)
}

// checkHTTP asks server's HTTP endpoint from the client pod with curl and checks that
// the right server answered and saw the client's own pod IP.
func checkHTTP(t *testing.T, client string, server corev1.Pod) {
	t.Helper()
	out, err := myelin("lab", "exec", client, "--", "curl", "-sS", "-m", "5", "http://"+server.Status.PodIP+":8080/")
	if err != nil {
		t.Errorf("curl %s (%s on %s) from %s: %v\n%s", server.Name, server.Status.PodIP, server.Spec.NodeName, client, err, out)
		return
	}
	if !strings.HasPrefix(out, "server="+server.Name+" client=10.244.") {
		t.Errorf("curl %s: answered %q", server.Name, out)
	}
}

// TestLabKubeletFailures covers the lab kubelet's failure paths: a CNI ADD that fails
// is recorded on the Pod as FailedCreatePodSandBox and retried until it succeeds, and a
// crashing command is restarted with its restart count and last exit reported.
func TestLabKubeletFailures(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "1", "--cni", "bridge")
	ctx := context.Background()
	node := labplan.NodeName(1)

	// A conflist that sorts first and names a plugin that does not exist.
	broken := filepath.Join(paths.CNIConfDir(node), "00-broken.conflist")
	conf := `{"cniVersion":"1.0.0","name":"broken","plugins":[{"type":"myelin-no-such-plugin"}]}`
	if err := os.WriteFile(broken, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "retry", Labels: map[string]string{"app": "retry"}},
		Spec: hostPod("retry", "sleep", "infinity")}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, podTimeout, "FailedCreatePodSandBox event naming the missing plugin", func(ctx context.Context) (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=retry"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "myelin-no-such-plugin") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	runningPods(t, cs, "app=retry", 1)

	crash := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "crash"},
		Spec: hostPod("crash", "sh", "-c", "exit 3")}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, crash, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, podTimeout, "crashing command restarted", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "crash", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		s := p.Status.ContainerStatuses[0]
		last := s.LastTerminationState.Terminated
		return s.RestartCount >= 2 && last != nil && last.ExitCode == 3,
			fmt.Sprintf("restarts=%d last=%+v", s.RestartCount, last)
	})
	labDown(t)
}

// TestLabBadInput checks that bad options and an unfit machine each get one clear line
// and leave nothing behind.
func TestLabBadInput(t *testing.T) {
	requireRoot(t)
	requireNoLab(t)
	expectFailure := func(t *testing.T, want string, argv ...string) {
		t.Helper()
		out, err := myelin(argv...)
		if err == nil {
			t.Fatalf("myelin %v succeeded, want failure\n%s", argv, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.Contains(lines[len(lines)-1], want) {
			t.Errorf("myelin %v: %q, want the last line to contain %q", argv, out, want)
		}
		for _, left := range leftovers() {
			t.Errorf("left behind after failed %v: %s", argv, left)
		}
	}
	t.Run("nodes", func(t *testing.T) {
		expectFailure(t, "--nodes 17: must be between 1 and 16", "lab", "up", "--nodes", "17")
	})
	t.Run("cni", func(t *testing.T) { expectFailure(t, `--cni "weave": unknown CNI`, "lab", "up", "--cni", "weave") })
	t.Run("profile", func(t *testing.T) { expectFailure(t, `--profile "x": unknown profile`, "lab", "up", "--profile", "x") })
	t.Run("exec without lab", func(t *testing.T) { expectFailure(t, "no lab is running", "lab", "exec", "client", "--", "true") })
	t.Run("not root", func(t *testing.T) {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", myelinBin, "lab", "up").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "must run as root") {
			t.Errorf("lab up as nobody: %v %q, want a must-run-as-root error", err, out)
		}
	})
	t.Run("stale directory", func(t *testing.T) {
		// A lab's directory (marked by lab up) left by a crash is in the way.
		if err := os.MkdirAll(paths.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths.Marker(), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := myelin("lab", "up", "--cni", "bridge")
		if err == nil || !strings.Contains(out, "a stale lab is in the way ("+paths.Dir+")") || !strings.Contains(out, "myelin lab down") {
			t.Errorf("lab up over a stale directory: %v %q", err, out)
		}
		if _, err := myelin("lab", "down"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("foreign directory", func(t *testing.T) {
		// A directory with files and no marker is no lab's: up refuses it, down leaves it.
		if err := os.MkdirAll(paths.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		keep := filepath.Join(paths.Dir, "notes.txt")
		if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(paths.Dir)
		out, err := myelin("lab", "up", "--cni", "bridge")
		if err == nil || !strings.Contains(out, "is not a lab directory") {
			t.Errorf("lab up over a foreign directory: %v %q", err, out)
		}
		out, err = myelin("lab", "down")
		if err == nil || !strings.Contains(out, "not a lab directory") {
			t.Errorf("lab down of a foreign directory: %v %q; want it left with an error", err, out)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("lab down removed a file of a foreign directory: %v", err)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "0.0.0.0:10259")
		if err != nil {
			testenv.Skipf(t, "cannot hold port 10259 for the test: %v", err)
		}
		defer l.Close()
		expectFailure(t, "port 10259 is already in use on", "lab", "up", "--cni", "bridge")
	})
}
