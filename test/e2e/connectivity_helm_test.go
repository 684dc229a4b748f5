package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/hubbletool"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/testenv"
)

// TestLabConnectivityHelm runs both commands as on a real cluster: kubelet +
// containerd nodes with myelin installed by the Helm chart (native routing). The
// connectivity test's pods run the myelin/test image and are probed through pods/exec;
// the sysdump reads every node from the chart's agent pods through pods/exec. The
// chart's relay and UI run too, with hubble.tls and the chart's generated certificates,
// one per role (hubblePodsReadTheirKey, relayServesOnlyItsClients).
func TestLabConnectivityHelm(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	helm := testenv.Helm(t)
	version := buildTestImages(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", "2")
	sets := append(append([]string{"image.tag=" + version}, helmLabSets...), helmModeSets["native"]...)
	// --wait returns once the relay and the UI are ready too: both read their key
	// before they listen, as non-root through the pod's fsGroup.
	sets = append(sets, "hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true")
	args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
	if out, err := helmRun(helm, args...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	waitAgentsReady(t, cs, 2, "myelin/agent:"+version)
	hubblePodsReadTheirKey(t)
	relayServesOnlyItsClients(t)

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

// hubblePodsReadTheirKey: the relay serves mutual TLS, and in the relay's and the UI's
// pods (ready, so they have read the key) the process is user 65534, the key is root's
// with group 65534 (the pod's fsGroup) and mode 0440, and the root filesystem refuses
// writes (docs/install.md, "Pod security of the relay and the UI").
func hubblePodsReadTheirKey(t *testing.T) {
	t.Helper()
	for _, deploy := range []string{"hubble-relay", "hubble-ui"} {
		out, err := kubectl("-n", "kube-system", "exec", "deploy/"+deploy, "--", "sh", "-c",
			"id -u; stat -L -c 'key %a %u %g' /etc/myelin/hubble-tls/tls.key; touch /probe 2>&1 || true")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 3 || lines[0] != "65534" || lines[1] != "key 440 0 65534" || !strings.Contains(lines[2], "Read-only file system") {
			t.Errorf("%s pod: id -u; stat tls.key; touch /probe: %v\n%s\nwant 65534, key 440 0 65534 and a touch refused by the read-only root", deploy, err, out)
		}
	}
	out, err := kubectl("-n", "kube-system", "logs", "deploy/hubble-relay")
	if err != nil || !strings.Contains(out, "tls=true") || !strings.Contains(out, "client-certificates=required") {
		t.Errorf("relay log: %v\n%s\nwant its startup line with tls=true client-certificates=required", err, out)
	}
}

// relayServesOnlyItsClients: with the chart's generated per-role certificates the relay
// reaches both agents with its own (hubble status through it, presenting the UI's
// certificate, counts 2 of 2 nodes), and an agent's certificate, which root on any node
// can read, does not open the relay (docs/hubble.md, "TLS").
func relayServesOnlyItsClients(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	files := func(secret, role string) []string {
		var out []string
		for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
			b64, err := kubectl("-n", "kube-system", "get", "secret", secret, "-o", "jsonpath={.data."+strings.ReplaceAll(key, ".", `\.`)+"}")
			b, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
			if err != nil || derr != nil || len(b) == 0 {
				t.Fatalf("Secret %s key %s: %v %v %q", secret, key, err, derr, b64)
			}
			f := filepath.Join(dir, role+"-"+key)
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
		return out
	}
	ui, agent := files("myelin-hubble-ui-tls", "ui"), files("myelin-hubble-tls", "agent")
	fwd := exec.Command(filepath.Join(lab.KubeBinDir(), "kubectl"), "--kubeconfig", paths.Kubeconfig(),
		"-n", "kube-system", "port-forward", "deploy/hubble-relay", "14245:4245")
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fwd.Process.Kill(); _ = fwd.Wait() }()
	status := func(creds []string) (string, error) {
		cmd := exec.Command(hubbletool.Bin(), "status", "--server", "localhost:14245", "--tls",
			"--tls-server-name", "relay.hubble.myelin.local", "--tls-ca-cert-files", creds[0],
			"--tls-client-cert-file", creds[1], "--tls-client-key-file", creds[2], "--timeout", "5s")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	eventually(t, 2*time.Minute, "hubble status through the relay with the UI's certificate: both nodes", func(context.Context) (bool, string) {
		out, err := status(ui)
		return err == nil && strings.Contains(out, "Connected Nodes: 2/2"), fmt.Sprintf("%v: %s", err, out)
	})
	if out, err := status(agent); err == nil {
		t.Errorf("hubble status through the relay with an agent's certificate succeeded: %s", out)
	}
}
