package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
)

// hostPort is the port TestLabHelmHostPort exposes a pod's 8080 on.
const hostPort = 18080

// TestLabHelmHostPort checks hostPort as a user of the chart gets it (cni.hostPort,
// the chained portmap plugin): a pod with ports[].hostPort answers on its node's address
// from its own node, from the other node and from a pod on the other node; the
// DNAT rules are in the node's netns and none in the machine's. In the same lab, the
// controller-manager writes the Service's v1 Endpoints, through which the apiserver's
// services/proxy reaches the pod (what the conformance suite's Proxy tests use). A pod
// asking for the agent's cluster health port as its hostPort is refused by the
// kubelet (the chart declares the agent's ports), so it cannot take the other nodes'
// probes.
func TestLabHelmHostPort(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	helm := testenv.Helm(t)
	rootNAT := rootNATRules(t)
	version := buildTestImages(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", "2")
	sets := append(append([]string{"image.tag=" + version}, helmLabSets...), helmModeSets["native"]...)
	args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
	if out, err := helmRun(helm, args...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	waitAgentsReady(t, cs, 2, "myelin/agent:"+version)

	image := images.Ref(images.Test, version)
	node1, node2 := labplan.NodeName(1), labplan.NodeName(2)
	hostPortPod(t, cs, "hp", node1, image, hostPort)
	containerPod(t, cs, "hp-client", node2, image, nil, "sh", "-c", "exec sleep 3600")
	pods := waitContainersRunning(t, cs, "hp", "hp-client")
	addr := fmt.Sprintf("%s:%d", pods["hp"].Status.HostIP, hostPort)

	for _, from := range []string{node1, node2} {
		eventually(t, 30*time.Second, from+" reaches the hostPort "+addr, func(context.Context) (bool, string) {
			out, err := inNode(from, "curl", "-sS", "-m", "5", "http://"+addr+"/")
			return err == nil && strings.HasPrefix(out, "server=hp "), fmt.Sprintf("%v %q, want server=hp", err, out)
		})
	}
	eventually(t, 30*time.Second, "a pod on "+node2+" reaches the hostPort "+addr, func(context.Context) (bool, string) {
		out, err := kubectl("exec", "hp-client", "--", "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+strings.Replace(addr, ":", " ", 1))
		return err == nil && strings.Contains(out, "server=hp "), fmt.Sprintf("%v %q, want server=hp", err, out)
	})
	if out, err := inNode(node1, "iptables-save", "-t", "nat"); err != nil || !strings.Contains(out, fmt.Sprintf("--dport %d", hostPort)) {
		t.Errorf("node %s's nat table has no DNAT for hostPort %d (%v):\n%s", node1, hostPort, err, out)
	}
	if after := rootNATRules(t); after != rootNAT {
		t.Errorf("the machine's nat table changed while the lab ran (hostPort rules must stay in the node's netns):\nbefore:\n%s\nafter:\n%s", rootNAT, after)
	}
	serviceProxy(t, cs)

	hostPortPod(t, cs, "hp-health", node1, image, 4240) // the chart's clusterHealthPort
	eventually(t, time.Minute, "the kubelet refuses hostPort 4240 (the agent's)", func(ctx context.Context) (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hp-health", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && strings.Contains(p.Status.Message, "NodePorts"),
			fmt.Sprintf("phase %s, reason %q, message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	if out, err := inNode(node1, "curl", "-sS", "-m", "5", "http://"+pods["hp"].Status.HostIP+":4240/hello"); err == nil && strings.HasPrefix(out, "server=") {
		t.Errorf("the cluster health port answers as a pod: %q", out)
	}
}

// hostPortPod runs the lab's HTTP server on 8080 with ports[].hostPort = port.
func hostPortPod(t *testing.T, cs kubernetes.Interface, name, node, image string, port int32) {
	t.Helper()
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"myelin", "lab", "serve", "--listen", ":8080", "--name", name},
				Ports:   []corev1.ContainerPort{{ContainerPort: 8080, HostPort: port, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// serviceProxy puts a Service in front of the pod hp and reads it through the
// apiserver's services/proxy, which resolves the Service through its v1 Endpoints.
func serviceProxy(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	createService(t, cs, "hp", "hp", nil)
	eventually(t, time.Minute, "v1 Endpoints of Service hp", func(ctx context.Context) (bool, string) {
		ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "hp", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(ep.Subsets) > 0 && len(ep.Subsets[0].Addresses) == 1, fmt.Sprintf("subsets %+v", ep.Subsets)
	})
	eventually(t, time.Minute, "services/proxy to hp", func(context.Context) (bool, string) {
		out, err := kubectl("get", "--raw", "/api/v1/namespaces/default/services/hp:http/proxy/")
		return err == nil && strings.HasPrefix(out, "server=hp "), fmt.Sprintf("%v %q, want server=hp", err, out)
	})
}

// rootNATRules is the machine's (root netns) nat table, without counters.
func rootNATRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -t nat -S: %v\n%s", err, out)
	}
	return string(out)
}
