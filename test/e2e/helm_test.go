package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
	"github.com/myelin-net/myelin/internal/nodelayout"
	"github.com/myelin-net/myelin/internal/testenv"
)

// The chart as installed into a lab (docs/install.md, "In the lab").
var (
	chartDir    = filepath.Join("..", "..", "install", "helm", "myelin")
	helmLabSets = []string{"perNodePaths=true", "bpf.mountPropagation=None", "cni.binPath=/run/myelin-lab/cni/bin", "cni.confPath=/run/myelin-lab/cni/net.d", "k8sServiceHost=198.18.0.1", "k8sServicePort=6443", "clusterCIDR=10.244.0.0/16",
		"socketLB.cgroupRoot=" + labCgroup2(),    // perNodePaths appends the node: its own cgroup
		"socketLB.netnsPath=" + paths.NodesDir()} // the nodes' containerd mount pod netns below it
	helmModeSets = map[string][]string{
		"native": {"routingMode=native", "autoDirectNodeRoutes=true", "ipv4NativeRoutingCIDR=10.244.0.0/16"},
		"tunnel": {"routingMode=tunnel", "autoDirectNodeRoutes=false"},
	}
)

// TestLabHelmContainerd installs myelin as a user would: real kubelets and containerd
// with no CNI, `helm install` of install/helm/myelin, the DaemonSet's agents in
// containers of the locally built image. In native and then tunnel mode, pods from the
// test image talk same-node, cross-node and through a Service. In native mode `helm
// upgrade` to another image and changed values rolls the agents one at a time while a
// connection through the Service and a cross-node stream stay open: every request is
// answered and neither stream end sees a reset. After each mode the chart's cleanup
// mode and `helm uninstall` leave no object, and no BPF pin, CNI file, link or iptables
// chain of myelin on the nodes, so the second install starts from a clean node.
func TestLabHelmContainerd(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	helm := testenv.Helm(t)
	version := buildTestImages(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", "2")
	image := images.Ref(images.Test, version)

	for _, mode := range []string{"native", "tunnel"} {
		sets := append(append([]string{"image.tag=" + version}, helmLabSets...), helmModeSets[mode]...)
		args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
		if out, err := helmRun(helm, args...); err != nil {
			t.Fatalf("%s: helm install: %v\n%s", mode, err, out)
		}
		waitAgentsReady(t, cs, 2, "myelin/agent:"+version)
		agentInPod(t, mode)
		svc := podsTalk(t, cs, image, mode)
		agentSeesPodNetns(t, cs)
		if mode == "native" {
			upgradeUnderTraffic(t, cs, helm, image, version, svc)
		}
		uninstallClean(t, cs, helm)
	}
}

// agentInPod checks what an operator uses on an agent in a pod: `myelin status` inside
// it (kubectl exec) and from the machine (--node) name the node and the mode, and the
// agent's log lines on stdout are JSON.
func agentInPod(t *testing.T, mode string) {
	t.Helper()
	for what, run := range map[string]func() (string, error){
		"kubectl exec ds/myelin -- myelin status": func() (string, error) {
			return kubectl("-n", "kube-system", "exec", "ds/myelin", "-c", "agent", "--", "myelin", "status")
		},
		"myelin status --node " + labplan.NodeName(1): func() (string, error) { return myelin("status", "--node", labplan.NodeName(1)) },
	} {
		out, err := run()
		if err != nil || !strings.Contains(out, "Node:") || !strings.Contains(out, "Network: "+mode) {
			t.Errorf("%s: %v\n%s\nwant the Node row and Network: %s", what, err, out, mode)
		}
	}
	out, err := kubectl("-n", "kube-system", "logs", "-l", "app.kubernetes.io/name=myelin", "-c", "agent", "--tail", "50")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("kubectl logs of the agent pods: %v %q", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("agent log line is not a JSON record with msg: %q (%v)", line, err)
			break
		}
	}
}

// agentSeesPodNetns checks that node-1's agent container sees the network namespaces
// containerd made for pods started after it (podsTalk's), where it enters them to close
// UDP sockets connected to a removed backend: the chart mounts the runtime's netns
// directory (socketLB.netnsPath; the lab's nodes directory, a shared mount) with
// HostToContainer propagation. Without the mount, or without propagation, the agent
// sees no namespace made after it started.
func agentSeesPodNetns(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	pods, err := agentPods(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != labplan.NodeName(1) {
			continue
		}
		dir := filepath.Join(paths.ContainerdState(p.Spec.NodeName), "io.containerd.grpc.v1.cri", "netns") // the CRI plugin's state
		// A namespace is a mount of nsfs on a file of that directory: without
		// propagation the agent sees the file, not the mount, and can't enter it.
		out, err := kubectl("-n", "kube-system", "exec", p.Name, "-c", "agent", "--", "cat", "/proc/self/mountinfo")
		if err != nil {
			t.Fatalf("the agent's mounts on %s: %v %s", p.Spec.NodeName, err, out)
		}
		var netns []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/cni-") && strings.Contains(line, " - nsfs ") {
				netns = append(netns, f[4])
			}
		}
		if len(netns) == 0 {
			t.Errorf("the agent on %s has no pod network namespace mounted below %s, want those of the pods started after it", p.Spec.NodeName, dir)
		}
		return
	}
	t.Errorf("no agent pod on %s", labplan.NodeName(1))
}

func setFlags(sets []string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, "--set", s)
	}
	return out
}

func helmRun(helm string, args ...string) (string, error) {
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+paths.Kubeconfig())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// agentPods lists the DaemonSet's pods.
func agentPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=myelin"})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitAgentsReady waits for n ready agent pods, all running image, and for every Node
// to be Ready (the agent wrote the conflist).
func waitAgentsReady(t *testing.T, cs kubernetes.Interface, n int, image string) {
	t.Helper()
	eventually(t, 3*time.Minute, "agent pods ready with "+image, func(ctx context.Context) (bool, string) {
		pods, err := agentPods(ctx, cs)
		if err != nil {
			return false, err.Error()
		}
		var ready int
		var state []string
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(p) && p.Spec.Containers[0].Image == image {
				ready++
			}
			state = append(state, fmt.Sprintf("%s on %s: %s ready=%v %s", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image, podReady(p), podWaiting(&p)))
		}
		return ready == n && len(pods) == n, strings.Join(state, "; ")
	})
	eventually(t, time.Minute, "nodes Ready", func(ctx context.Context) (bool, string) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, node := range nodes.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return false, node.Name + ": " + c.Message
				}
			}
		}
		return true, ""
	})
}

// podsTalk starts a server and two clients (same node, other node) of the test image
// and checks each reaches the server by its address and through a ClusterIP Service,
// which it returns.
func podsTalk(t *testing.T, cs kubernetes.Interface, image, mode string) *corev1.Service {
	t.Helper()
	srv, near, far := "srv-"+mode, "near-"+mode, "far-"+mode
	idle := []string{"sh", "-c", "exec sleep 3600"}
	containerPod(t, cs, srv, labplan.NodeName(1), image, map[string]string{"app": srv}, "myelin", "lab", "serve", "--listen", ":8080", "--name", srv)
	containerPod(t, cs, near, labplan.NodeName(1), image, nil, idle...)
	containerPod(t, cs, far, labplan.NodeName(2), image, nil, idle...)
	svc := createService(t, cs, srv, srv, nil)
	pods := waitContainersRunning(t, cs, srv, near, far)
	for _, from := range []string{near, far} {
		for target, port := range map[string]string{pods[srv].Status.PodIP: "8080", svc.Spec.ClusterIP: "80"} {
			want := "server=" + srv + " client=" + pods[from].Status.PodIP
			eventually(t, 30*time.Second, fmt.Sprintf("%s: %s reaches %s:%s", mode, from, target, port), func(context.Context) (bool, string) {
				out, err := kubectl("exec", from, "--", "sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s %s`, target, port))
				return err == nil && strings.Contains(out, want), fmt.Sprintf("%v %q, want %q", err, out, want)
			})
		}
	}
	return svc
}

// upgradeUnderTraffic holds an HTTP session through svc (from node 2 to the server on
// node 1) and a cross-node stream open while `helm upgrade` moves the agents to
// another image and changes lb-algorithm.
func upgradeUnderTraffic(t *testing.T, cs kubernetes.Interface, helm, image, version string, svc *corev1.Service) {
	t.Helper()
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	never := func(name, node string, command ...string) { neverPod(t, cs, name, node, image, command...) }
	never("session", n2, "myelin", "lab", "http-session", "--to", svc.Spec.ClusterIP+":80", "--count", "0", "--interval", "100ms")
	// The sink's nc reads an idle pipe: an ended stdin would end the connection.
	never("sink", n2, "sh", "-c", "sleep 3600 | nc -l -p 9000 >/dev/null; echo stream-ended; exec sleep 3600")
	sink := waitContainersRunning(t, cs, "sink")["sink"]
	never("source", n1, "sh", "-c", fmt.Sprintf("while :; do head -c 65536 /dev/zero; sleep 0.05; done | nc %s 9000; echo stream-ended; exec sleep 3600", sink.Status.PodIP))
	waitContainersRunning(t, cs, "session", "source")
	before := rxBytes(t, "sink")
	eventually(t, 30*time.Second, "the stream flows", func(context.Context) (bool, string) {
		now := rxBytes(t, "sink")
		return now > before+65536, fmt.Sprintf("the sink received %d bytes", now-before)
	})
	before = rxBytes(t, "sink")

	// The new image: the same binaries under another tag, in every node's containerd.
	newTag := version + "-upgrade"
	if out, err := myelin("images", "build", "--version", newTag, "--force"); err != nil {
		t.Fatalf("myelin images build --version %s: %v\n%s", newTag, err, out)
	}
	for _, node := range []string{n1, n2} {
		archive := images.Archive(cni.ToolCache(), newTag, images.Agent)
		if out, err := exec.Command("ctr", "-a", paths.ContainerdSocket(node), "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
			t.Fatalf("import %s into %s: %v\n%s", archive, node, err, out)
		}
	}

	stop := make(chan struct{})
	var maxUnready int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); maxUnready = watchUnready(cs, stop) }()
	out, err := helmRun(helm, "upgrade", "myelin", chartDir, "-n", "kube-system", "--reset-then-reuse-values", "--wait", "--timeout", "5m",
		"--set", "image.tag="+newTag, "--set", "loadBalancer.algorithm=maglev")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	waitAgentsReady(t, cs, 2, "myelin/agent:"+newTag)
	if maxUnready > 1 {
		t.Errorf("helm upgrade: %d agent pods were not ready at once; the DaemonSet must roll them one at a time", maxUnready)
	}
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "myelin-config", metav1.GetOptions{})
	if err != nil || cm.Data["lb-algorithm"] != "maglev" {
		t.Errorf("myelin-config after the upgrade: %v %v, want lb-algorithm maglev", err, cm.Data)
	}

	time.Sleep(2 * time.Second) // traffic on the new agents too
	if after := rxBytes(t, "sink"); after <= before {
		t.Errorf("the stream's receiver got no bytes across the upgrade (%d before, %d after)", before, after)
	}
	for _, pod := range []string{"sink", "source"} {
		if out, err := kubectl("logs", pod); err != nil || strings.Contains(out, "stream-ended") {
			t.Errorf("stream %s across the upgrade: %v %q (the connection ended)", pod, err, out)
		}
	}
	stopSession(t, cs)
}

// neverPod runs command once in a container of image on node: a command that ends
// (a reset stream, a failed session) leaves the pod finished instead of restarted.
func neverPod(t *testing.T, cs kubernetes.Interface, name, node, image string, command ...string) {
	t.Helper()
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: name, Image: image, Command: command, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// watchUnready samples the agent pods until stop closes and returns the most that
// were not ready at one time.
func watchUnready(cs kubernetes.Interface, stop <-chan struct{}) int {
	most := 0
	for {
		select {
		case <-stop:
			return most
		case <-time.After(200 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pods, err := agentPods(ctx, cs)
		cancel()
		if err != nil {
			continue
		}
		unready := 2 - len(pods) // a deleted pod not yet replaced counts as not ready
		for _, p := range pods {
			if !podReady(p) || p.DeletionTimestamp != nil {
				unready++
			}
		}
		most = max(most, unready)
	}
}

// rxBytes is what the pod's eth0 has received.
func rxBytes(t *testing.T, pod string) int64 {
	t.Helper()
	out, err := kubectl("exec", pod, "--", "cat", "/sys/class/net/eth0/statistics/rx_bytes")
	if err != nil {
		t.Fatalf("rx bytes of %s: %v %s", pod, err, out)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("rx bytes of %s: %q: %v", pod, out, err)
	}
	return n
}

// stopSession stops the HTTP session (SIGTERM to its process) and checks that it
// answered every request it sent over its one connection. The session exits at
// once, and the runtime then kills what still runs in its container: the exec'd
// kill itself, if it has not exited yet (exit code 137). That is the signal
// delivered, not a failure; whether the session ended well is what its pod's phase
// and its last log line say.
func stopSession(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	if out, err := kubectl("exec", "session", "--", "kill", "-TERM", "1"); err != nil && !strings.Contains(out, "exit code 137") {
		t.Fatalf("stop the session: %v %s", err, out)
	}
	eventually(t, 30*time.Second, "session pod finished", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "session", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	out, err := kubectl("logs", "session")
	if err != nil {
		t.Fatalf("kubectl logs session: %v %s", err, out)
	}
	var res labtools.SessionResult
	if err := json.Unmarshal([]byte(lastLines(out, 1)), &res); err != nil {
		t.Fatalf("session result %q: %v", out, err)
	}
	t.Logf("HTTP session through the Service across the upgrade: %+v", res)
	if res.Error != "" || res.Requests == 0 || res.Answered != res.Requests {
		t.Errorf("HTTP session through the Service across the upgrade: %d of %d answered, error %q", res.Answered, res.Requests, res.Error)
	}
}

// uninstallClean deletes the test pods (while the agents still answer CNI DEL), runs
// the chart's cleanup mode, uninstalls, and checks that nothing of myelin is left.
func uninstallClean(t *testing.T, cs kubernetes.Interface, helm string) {
	t.Helper()
	ctx := context.Background()
	if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the test pods: %v", err)
	}
	svcs, _ := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	for _, s := range svcs.Items {
		if s.Name != "kubernetes" {
			_ = cs.CoreV1().Services("default").Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	eventually(t, 2*time.Minute, "test pods gone", func(ctx context.Context) (bool, string) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d pods", len(l.Items))
	})
	if out, err := helmRun(helm, "upgrade", "myelin", chartDir, "-n", "kube-system", "--reset-then-reuse-values", "--set", "cleanup=true", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm upgrade --set cleanup=true: %v\n%s", err, out)
	}
	// docs/install.md: rollout status returns once every cleanup pod is ready, and a
	// cleanup pod is ready only once its node is clean (helm's --wait counts none ready
	// with maxUnavailable 100%), so the nodes must be clean right now.
	if out, err := kubectl("-n", "kube-system", "rollout", "status", "ds/myelin", "--timeout", "3m"); err != nil {
		t.Fatalf("kubectl rollout status ds/myelin in cleanup mode: %v\n%s", err, out)
	}
	for _, node := range []string{labplan.NodeName(1), labplan.NodeName(2)} {
		for _, left := range nodeLeftovers(node) {
			t.Errorf("%s once the cleanup rollout is done (before helm uninstall): %s", node, left)
		}
	}
	if out, err := helmRun(helm, "uninstall", "myelin", "-n", "kube-system", "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	for _, obj := range []string{"daemonset/myelin", "serviceaccount/myelin", "configmap/myelin-config", "role/myelin-agent",
		"rolebinding/myelin-agent", "clusterrole/myelin-agent", "clusterrolebinding/myelin-agent"} {
		if out, err := kubectl("get", "-n", "kube-system", obj); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("%s after helm uninstall: %v %s", obj, err, out)
		}
	}
	eventually(t, time.Minute, "agent pods gone", func(ctx context.Context) (bool, string) {
		pods, err := agentPods(ctx, cs)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods %v", len(pods), err)
	})
	for _, node := range []string{labplan.NodeName(1), labplan.NodeName(2)} {
		for _, left := range nodeLeftovers(node) {
			t.Errorf("%s after cleanup and helm uninstall: %s", node, left)
		}
	}
}

// nodeLeftovers lists what myelin put on a lab node that is still there: BPF pins,
// state, CNI plugin and conflist, links other than the node's own, iptables chains.
func nodeLeftovers(node string) []string {
	var out []string
	for _, p := range []string{
		nodelayout.PerNode(nodelayout.BPFFSDir, node),
		nodelayout.PerNode(nodelayout.StateDir, node),
		filepath.Join(paths.CNIBinDir(node), "myelin-cni"),
		filepath.Join(paths.CNIConfDir(node), nodelayout.CNIConfFile),
	} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, "path "+p)
		}
	}
	links, err := exec.Command("ip", "-n", node, "-o", "link", "show").Output()
	if err != nil {
		out = append(out, "unknown: ip -n "+node+" link: "+err.Error())
	}
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if name != "lo" && name != "eth0" {
			out = append(out, "link "+name)
		}
	}
	rules, err := exec.Command("ip", "netns", "exec", node, "iptables-save").Output()
	if err != nil {
		out = append(out, "unknown: iptables-save in "+node+": "+err.Error())
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.Contains(strings.ToUpper(l), "MYELIN") {
			out = append(out, "iptables "+l)
		}
	}
	return out
}

// labCgroup2 is the machine's cgroup2 mount, below which each lab node has its cgroup
// (labplan.Cgroup2Dir): /sys/fs/cgroup/unified here (hybrid), /sys/fs/cgroup on v2 only.
func labCgroup2() string {
	if mnt, err := datapath.Cgroup2Mount(); err == nil {
		return mnt
	}
	return "/sys/fs/cgroup"
}
