package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/lab"
	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// createNodeConfig creates the NodeConfig kube-system/name (agents read no other
// namespace's) for the nodes with the labels of selector.
func createNodeConfig(t *testing.T, name string, selector map[string]string, defaults map[string]string) {
	t.Helper()
	sel := metav1.LabelSelector{MatchLabels: selector}
	if err := driver(t).CreateNodeConfig(context.Background(), config.ConfigMapNamespace, name, sel, defaults); err != nil {
		t.Fatal(err)
	}
}

func deleteNodeConfig(t *testing.T, name string) {
	t.Helper()
	if err := driver(t).DeleteNodeConfig(context.Background(), config.ConfigMapNamespace, name); err != nil {
		t.Fatal(err)
	}
}

func labelNode(t *testing.T, cs kubernetes.Interface, node, key, value string) {
	t.Helper()
	v := `"` + value + `"`
	if value == "" {
		v = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func restartAgent(t *testing.T, node string) {
	t.Helper()
	if err := lab.Restart(paths, labmyelin.AgentProcess(node), false); err != nil {
		t.Fatal(err)
	}
	waitAgentReady(t, node)
}

// TestLabMyelinMigration moves node-2 from legacy to BPF host routing by labelling it
// into a NodeConfig and restarting its agent, then back, while a cross-node TCP stream
// and a request every 100 ms run: no request fails and the stream stays up. A bad
// NodeConfig then stops the agent with a message naming it, and the datapath keeps
// forwarding meanwhile.
func TestLabMyelinMigration(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native-legacy")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	iperfIP, webIP := deployTrafficPods(t, cs, n1, n2)
	createNodeConfig(t, "bpf-nodes", map[string]string{"myelin.io/host-routing": "bpf"}, map[string]string{"host-routing": "bpf"})

	tr := startTraffic(t, iperfIP, webIP, 40)
	time.Sleep(2 * time.Second)
	labelNode(t, cs, n2, "myelin.io/host-routing", "bpf")
	restartAgent(t, n2)
	expectHostRouting(t, n2, "BPF", "host-routing is bpf (NodeConfig kube-system/bpf-nodes)")
	expectHostRouting(t, n1, "Legacy", "")
	out, err := myelin("config", "--node", n2)
	if err != nil || !strings.Contains(out, "NodeConfig kube-system/bpf-nodes") {
		t.Errorf("myelin config --node %s: %v\n%s; want host-routing from NodeConfig kube-system/bpf-nodes", n2, err, out)
	}
	time.Sleep(3 * time.Second)

	labelNode(t, cs, n2, "myelin.io/host-routing", "")
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "host-routing is legacy (ConfigMap kube-system/myelin-config)")
	time.Sleep(3 * time.Second)

	// A NodeConfig with a bad value stops the agent before it touches the datapath.
	createNodeConfig(t, "broken", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"host-routing": "turbo"})
	signalAgent(t, n2)
	eventually(t, time.Minute, "agent log names the bad NodeConfig", func(context.Context) (bool, string) {
		b, _ := os.ReadFile(paths.Log(labmyelin.AgentProcess(n2)))
		return strings.Contains(string(b), `NodeConfig kube-system/broken: key \"host-routing\" value \"turbo\": must be one of auto, bpf, legacy`),
			lastLines(string(b), 2)
	})
	time.Sleep(2 * time.Second) // requests keep flowing with no agent on node-2
	deleteNodeConfig(t, "broken")
	waitAgentReady(t, n2)

	// So does a Hubble TLS file it cannot read (before, the agent loaded and attached
	// the datapath first, then failed when the Hubble API started).
	logPath := paths.Log(labmyelin.AgentProcess(n2))
	b, _ := os.ReadFile(logPath)
	from := len(b)
	createNodeConfig(t, "broken-tls", map[string]string{"kubernetes.io/hostname": n2},
		map[string]string{"hubble-tls-cert-file": "/nonexistent/hubble.crt", "hubble-tls-key-file": "/nonexistent/hubble.key"})
	signalAgent(t, n2)
	eventually(t, time.Minute, "agent log names the unreadable Hubble TLS files", func(context.Context) (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b[from:]), "hubble-tls-cert-file"), lastLines(string(b), 2)
	})
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b[from:]), "datapath loaded") {
		t.Errorf("agent loaded the datapath before refusing its Hubble TLS files:\n%s", lastLines(string(b), 10))
	}
	time.Sleep(2 * time.Second)
	deleteNodeConfig(t, "broken-tls")
	waitAgentReady(t, n2)

	tr.finish(t)
	labDown(t)
}
