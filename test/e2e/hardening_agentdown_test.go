package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/cniplugin"
	"github.com/myelin-net/myelin/internal/lab"
	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// inNetNS runs a command in the network namespace at path, without the apiserver
// (myelin lab exec looks the Pod up).
func inNetNS(path string, argv ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + path, "--"}, argv...)...).CombinedOutput()
	return string(out), err
}

// podNetNSOf is the network namespace of the Running pod default/name.
func podNetNSOf(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return podNetNS(*p)
}

// endpointOfPod returns the endpoint of a pod on node.
func endpointOfPod(t *testing.T, node, pod string) api.Endpoint {
	t.Helper()
	for _, ep := range endpointsOf(t, node) {
		if ep.Pod == pod {
			return ep
		}
	}
	t.Fatalf("no endpoint for pod %s on %s", pod, node)
	return api.Endpoint{}
}

// cniCheck runs the node's installed myelin-cni with CNI_COMMAND=CHECK for ep, as a
// runtime does (with the result of ep's ADD as prevResult), and returns its output.
func cniCheck(node string, ep api.Endpoint) (string, error) {
	prev, err := json.Marshal(cniplugin.ResultOf(ep))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(paths.CNIBinDir(node), "myelin-cni")
	cmd := exec.Command("nsenter", "--net="+labplan.NetNSPath(node), "--", bin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND=CHECK", "CNI_CONTAINERID="+ep.ContainerID, "CNI_NETNS="+ep.NetNS,
		"CNI_IFNAME="+ep.IfName, "CNI_PATH="+filepath.Dir(bin),
		"CNI_ARGS=K8S_POD_NAMESPACE="+ep.Namespace+";K8S_POD_NAME="+ep.Pod)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":%q,"prevResult":%s}`,
		api.NodeSocket(node), prev))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pinnedEndpoint looks ip up in node's pinned endpoints map.
func pinnedEndpoint(t *testing.T, node, ip string) bool {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join("/sys/fs/bpf/myelin", node, "myelin_endpoints"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	key := netip.MustParseAddr(ip).As4()
	value := make([]byte, m.ValueSize())
	return m.Lookup(key, &value) == nil
}

// signalProcess sends sig to a supervised lab process.
func signalProcess(t *testing.T, name string, sig syscall.Signal) {
	t.Helper()
	pid := processPID(t, name)
	if pid == 0 || syscall.Kill(pid, sig) != nil {
		t.Fatalf("cannot send %v to %s (pid %d)", sig, name, pid)
	}
}

// continueProcess resumes a stopped supervised process, if the lab still runs it
// (cleanup after a failure; lab down kills it either way).
func continueProcess(name string) {
	st, err := lab.LoadState(paths)
	if err != nil {
		return
	}
	for _, p := range st.Processes {
		if p.Name == name && p.Running {
			_ = syscall.Kill(p.PID, syscall.SIGCONT)
		}
	}
}

// datapathWorks checks, from the client pod's netns, pod-to-pod (webIP:8080 on the
// other node), pod-to-Service (svcIP:80) and masqueraded egress to the external host.
func datapathWorks(t *testing.T, what, clientNS, webIP, svcIP, nodeIP string) {
	t.Helper()
	for _, c := range []struct{ name, url, want string }{
		{"pod to pod", "http://" + webIP + ":8080/", "server="},
		{"pod to Service", "http://" + svcIP + "/", "server="},
		{"masqueraded egress", "http://203.0.113.10/", "client=" + nodeIP},
	} {
		out, err := inNetNS(clientNS, "curl", "-sS", "-m", "5", c.url)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %s %s: %v %q, want %q", what, c.name, c.url, err, out, c.want)
		}
	}
}

// natGCLastRun is when node's agent last ran its NAT GC without error.
func natGCLastRun(t *testing.T, node string) time.Time {
	t.Helper()
	for _, l := range agentStatus(t, node).Loops {
		if l.Name == "nat-gc" {
			return l.LastRun
		}
	}
	return time.Time{}
}

// TestLabMyelinAgentDown: with node-1's agent hung (SIGSTOP), pod-to-pod, pod-to-
// Service and masqueraded egress keep working, and a pod deleted on node-1 goes away
// (CNI DEL succeeds without the agent, removing its veth); once the agent resumes it
// releases the IP and removes the map entry. CNI CHECK fails for a broken endpoint.
// With the apiserver down, the datapath keeps forwarding, the running agent's NAT GC
// keeps running, and an agent restarted meanwhile starts its GC before it can reach
// the apiserver.
func TestLabMyelinAgentDown(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	iperfIP, webIP := deployTrafficPods(t, cs, n1, n2)
	svc := createService(t, cs, "websvc", "web", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	createPod(t, cs, "victim", n1, map[string]string{"app": "victim"}, "sleep", "infinity")
	createPod(t, cs, "broken", n1, map[string]string{"app": "broken"}, "sleep", "infinity")
	runningPods(t, cs, "app=victim", 1)
	runningPods(t, cs, "app=broken", 1)
	clientNS, nodeIP := podNetNSOf(t, cs, "client"), "198.18.0.11"
	datapathWorks(t, "all up", clientNS, webIP, svc.Spec.ClusterIP, nodeIP)

	checkBrokenEndpoint(t, n1, endpointOfPod(t, n1, "broken"))

	victim := endpointOfPod(t, n1, "victim")
	usedBefore := agentStatus(t, n1).IPAM.Used
	tr := startTraffic(t, iperfIP, webIP, 20)
	time.Sleep(2 * time.Second)
	signalProcess(t, labmyelin.AgentProcess(n1), syscall.SIGSTOP)
	t.Cleanup(func() { continueProcess(labmyelin.AgentProcess(n1)) })
	datapathWorks(t, "agent of node-1 hung", clientNS, webIP, svc.Spec.ClusterIP, nodeIP)
	deleteWithAgentHung(t, cs, n1, victim)
	signalProcess(t, labmyelin.AgentProcess(n1), syscall.SIGCONT)
	tr.finish(t)
	eventually(t, time.Minute, "the resumed agent released the deleted pod's IP and map entry", func(context.Context) (bool, string) {
		_, known := endpointsOf(t, n1)[victim.ContainerID]
		used := agentStatus(t, n1).IPAM.Used
		inMap := pinnedEndpoint(t, n1, victim.IP)
		return !known && !inMap && used == usedBefore-1, fmt.Sprintf("endpoint known %v, map entry %v, IPs used %d (before %d)", known, inMap, used, usedBefore)
	})
	if _, err := os.Stat(api.DeletedPath(api.DeletedDir(api.NodeSocket(n1)), victim.ContainerID)); !os.IsNotExist(err) {
		t.Errorf("the recorded delete is still there after the agent carried it out: %v", err)
	}

	apiserverDown(t, cs, n1, n2, clientNS, webIP, svc.Spec.ClusterIP, nodeIP)
	datapathWorks(t, "all up again", clientNS, webIP, svc.Spec.ClusterIP, nodeIP)
	labDown(t)
}

// checkBrokenEndpoint: CNI CHECK passes for a healthy endpoint and fails, naming the
// pod, the problems and the fix, once its map entry is deleted and myelin_from_pod
// detached (its tc filter removed).
func checkBrokenEndpoint(t *testing.T, node string, ep api.Endpoint) {
	t.Helper()
	if out, err := cniCheck(node, ep); err != nil {
		t.Fatalf("CNI CHECK of a healthy endpoint: %v %s", err, out)
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join("/sys/fs/bpf/myelin", node, "myelin_endpoints"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Delete(netip.MustParseAddr(ep.IP).As4()); err != nil {
		t.Fatalf("break the endpoint: delete its map entry: %v", err)
	}
	if out, err := inNode(node, "tc", "filter", "del", "dev", ep.HostIfName, "ingress"); err != nil {
		t.Fatalf("break the endpoint: remove its ingress filter: %v %s", err, out)
	}
	out, err := cniCheck(node, ep)
	t.Logf("CNI CHECK of the broken endpoint: %v %s", err, strings.TrimSpace(out))
	for _, want := range []string{"pod default/broken", "no entry for " + ep.IP, "myelin_from_pod is not attached to " + ep.HostIfName,
		"restart the myelin agent"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("CNI CHECK of a broken endpoint: %v %s; want a failure containing %q", err, out, want)
		}
	}
}

// deleteWithAgentHung deletes the pod of ep while node's agent is stopped: the Pod
// leaves the API (CNI DEL succeeded), its veth is gone, and the delete is recorded.
func deleteWithAgentHung(t *testing.T, cs kubernetes.Interface, node string, ep api.Endpoint) {
	t.Helper()
	if err := cs.CoreV1().Pods("default").Delete(context.Background(), ep.Pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "pod "+ep.Pod+" deleted with the agent hung", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, ep.Pod, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprint(err)
	})
	if out, err := inNode(node, "ip", "link", "show", ep.HostIfName); err == nil {
		t.Errorf("veth %s of the deleted pod still exists: %s", ep.HostIfName, out)
	}
	if out, _ := inNode(node, "ip", "route", "show", ep.IP); strings.TrimSpace(out) != "" {
		t.Errorf("route to the deleted pod's %s still there: %s", ep.IP, out)
	}
	rec, err := os.ReadFile(api.DeletedPath(api.DeletedDir(api.NodeSocket(node)), ep.ContainerID))
	if err != nil {
		t.Errorf("no recorded delete for the agent: %v", err)
	}
	t.Logf("pod %s deleted with the agent hung; recorded delete: %s", ep.Pod, rec)
}

// apiserverDown stops the apiserver (held down by the supervisor) for a while: an
// established stream and new connections (pod to pod, Service, egress) keep working,
// node-1's NAT GC keeps running, and node-2's agent, restarted meanwhile, starts its
// GC on the pinned maps before it reaches the apiserver; then the apiserver returns.
func apiserverDown(t *testing.T, cs kubernetes.Interface, n1, n2, clientNS, webIP, svcIP, nodeIP string) {
	t.Helper()
	hold := paths.Hold("kube-apiserver")
	if err := os.MkdirAll(filepath.Dir(hold), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(hold) })
	stream := exec.Command("nsenter", "--net="+clientNS, "--", "iperf3", "-c", iperfServer(t, cs), "-t", "25", "-b", "50M")
	var streamOut bytes.Buffer
	stream.Stdout, stream.Stderr = &streamOut, &streamOut
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	gcBefore := natGCLastRun(t, n1)
	logBefore := agentLog(t, n2)
	signalProcess(t, "kube-apiserver", syscall.SIGKILL)
	eventually(t, time.Minute, "apiserver down", func(ctx context.Context) (bool, string) {
		_, err := cs.Discovery().ServerVersion()
		return err != nil, "still answering"
	})
	signalProcess(t, labmyelin.AgentProcess(n2), syscall.SIGKILL) // restarted by the supervisor, with no apiserver
	datapathWorks(t, "apiserver down", clientNS, webIP, svcIP, nodeIP)
	eventually(t, time.Minute, "node-1's NAT GC runs with the apiserver down", func(context.Context) (bool, string) {
		last := natGCLastRun(t, n1)
		return last.After(gcBefore.Add(time.Second)), fmt.Sprintf("last run %v, before %v", last, gcBefore)
	})
	t.Logf("apiserver down: node-1 NAT GC ran at %v (last before the outage %v)", natGCLastRun(t, n1).Format(time.TimeOnly), gcBefore.Format(time.TimeOnly))
	eventually(t, time.Minute, "node-2's restarted agent runs its GC before reaching the apiserver", func(context.Context) (bool, string) {
		log := strings.TrimPrefix(agentLog(t, n2), logBefore)
		return strings.Contains(log, "datapath GC running on the pinned maps"), lastLines(log, 5)
	})
	if err := stream.Wait(); err != nil {
		t.Errorf("iperf3 stream across the apiserver outage failed: %v\n%s", err, lastLines(streamOut.String(), 10))
	}
	datapathWorks(t, "apiserver still down", clientNS, webIP, svcIP, nodeIP)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "apiserver back", func(ctx context.Context) (bool, string) {
		_, err := cs.Discovery().ServerVersion()
		return err == nil, fmt.Sprint(err)
	})
	waitAgentReady(t, n2)
}

func iperfServer(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	return runningPods(t, cs, "app=iperf", 1)[0].Status.PodIP
}

func agentLog(t *testing.T, node string) string {
	t.Helper()
	b, err := os.ReadFile(paths.Log(labmyelin.AgentProcess(node)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
