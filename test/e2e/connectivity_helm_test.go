package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/testenv"
)

// TestLabConnectivityHelm runs both commands as on a real cluster: kubelet +
// containerd nodes with myelin installed by the Helm chart (native routing). The
// connectivity test's pods run the myelin/test image and are probed through pods/exec;
// the sysdump reads every node from the chart's agent pods through pods/exec.
func TestLabConnectivityHelm(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	helm := testenv.Helm(t)
	version := buildTestImages(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", "2")
	sets := append(append([]string{"image.tag=" + version}, helmLabSets...), helmModeSets["native"]...)
	args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
	if out, err := helmRun(helm, args...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	waitAgentsReady(t, cs, 2, "myelin/agent:"+version)

	start := time.Now()
	out, err := myelin("connectivity", "test")
	t.Logf("myelin connectivity test (%v):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("connectivity test failed: %v", err)
	}
	for _, name := range []string{"pod-to-pod/same-node", "pod-to-pod/cross-node", "pod-to-service/cluster-ip",
		"pod-to-service/node-port/myelin-node-2", "pod-to-service/local-traffic/myelin-node-2", "pod-to-host", "host-to-pod/cross-node", "pod-to-outside", "mtu/icmp-df", "fragments/udp", "policy/denied", "policy/allowed"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s.*\spassed\s`).MatchString(out) {
			t.Errorf("scenario %s did not pass", name)
		}
	}
	noTestNamespaces(t, cs)

	path := t.TempDir() + "/dump.tar.gz"
	out, err = myelin("sysdump", "-o", path, "--drops-for", "1s")
	t.Logf("myelin sysdump:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, path)
	for _, node := range []string{"myelin-node-1", "myelin-node-2"} {
		for _, f := range []string{"status.json", "config.json", "services.json", "endpoints.json", "policy.json", "agent.log", "ip-route.txt"} {
			if strings.TrimSpace(files["nodes/"+node+"/"+f]) == "" {
				t.Errorf("archive lacks nodes/%s/%s", node, f)
			}
		}
		maps := 0
		for name, body := range files {
			if strings.HasPrefix(name, "nodes/"+node+"/maps/") && strings.Contains(body, `"total"`) {
				maps++
			}
		}
		if maps == 0 {
			t.Errorf("no map dump of %s from its agent pod", node)
		}
	}
	if !strings.Contains(files["nodes/myelin-node-1/bpf-objects.json"], `"myelin_from_netdev"`) {
		t.Errorf("bpf-objects.json (from the agent pod) lacks myelin_from_netdev:\n%.400s", files["nodes/myelin-node-1/bpf-objects.json"])
	}
	if !strings.Contains(files["nodes/myelin-node-2/status.json"], "myelin-node-2") {
		t.Errorf("node 2's status (from its agent pod) does not name it")
	}
	if !strings.Contains(files["cluster/daemonsets.json"], `"myelin"`) {
		t.Errorf("cluster/daemonsets.json lacks the myelin DaemonSet")
	}
}
