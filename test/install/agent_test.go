package install

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/cni/bridge"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// nodeArgs are a rendered container's args for node, with the build's plugin and the
// tool cache's portmap plugin in place of the image's paths.
func nodeArgs(c corev1.Container, bin, node string) []string {
	var args []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--cni-plugin=") { // the image's path; here the build's
			a = "--cni-plugin=" + filepath.Join(bin, "myelin-cni")
		}
		if strings.HasPrefix(a, "--portmap-plugin=") && a != "--portmap-plugin=" {
			a = "--portmap-plugin=" + images.PortmapBinary(cni.ToolCache())
		}
		args = append(args, strings.ReplaceAll(a, "$(NODE_NAME)", node))
	}
	return args
}

// agentAsPod runs myelin-agent on lab node 1 as the chart's pod would: the rendered
// container's args and env (node-local paths with the node's name), only the
// capabilities the chart adds (setpriv bounding set), and the chart's ServiceAccount
// token. It checks the health endpoint, `myelin status` as `kubectl exec` runs it, the
// fallback Event and JSON logs, then stops the agent with SIGTERM and checks that the
// datapath (pins, conflist) stays.
func agentAsPod(t *testing.T, bin string, paths labplan.Paths, kubectl string, agent corev1.Container) {
	t.Helper()
	node := labplan.NodeName(1)
	kubeconfig := serviceAccountKubeconfig(t, kubectl, paths)
	args := []string{"--net=" + labplan.NetNSPath(node), "setpriv", "--inh-caps=-all", "--ambient-caps=-all",
		"--bounding-set=-all," + capList(agent), "--", filepath.Join(bin, "myelin-agent"), "--kubeconfig=" + kubeconfig}
	env := os.Environ()
	args = append(args, nodeArgs(agent, bin, node)...)
	for _, e := range agent.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+strings.ReplaceAll(e.Value, "$(NODE_NAME)", node))
		}
	}
	var stdout, stderr syncBuffer
	cmd := exec.Command("nsenter", args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = append(env, "NODE_NAME="+node), &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	healthURL := "http://127.0.0.1:" + arg(agent, "--health-port")

	waitFor(t, exited, &stdout, "agent /readyz 200", func() bool {
		_, err := run(t, nil, "nsenter", "--net="+labplan.NetNSPath(node), "curl", "-sf", healthURL+"/readyz")
		return err == nil
	})
	if out, err := run(t, nil, "nsenter", "--net="+labplan.NetNSPath(node), "curl", "-sf", healthURL+"/healthz"); err != nil {
		t.Errorf("/healthz: %v %s", err, out)
	}
	statusInPod(t, bin, env, node)
	waitFor(t, exited, &stdout, "HostRoutingFallback Event on the Node", func() bool {
		out, _ := run(t, nil, kubectl, "get", "events", "-n", "default", "--field-selector",
			"involvedObject.kind=Node,involvedObject.name="+node+",reason=HostRoutingFallback", "-o", "name")
		return strings.TrimSpace(out) != ""
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("agent after SIGTERM: %v, want exit 0\n%s%s", err, stdout.String(), stderr.String())
	}
	checkJSONLogs(t, stdout.String())
	pins, _ := os.ReadDir(nodelayout.PerNode(nodelayout.BPFFSDir, node))
	conf := filepath.Join(strings.ReplaceAll(arg(agent, "--cni-conf-dir"), "$(NODE_NAME)", node), nodelayout.CNIConfFile)
	if _, err := os.Stat(conf); len(pins) == 0 || err != nil {
		t.Errorf("after SIGTERM: %d pins, conflist %v; want the datapath left running", len(pins), err)
	}
}

// statusInPod runs myelin status as kubectl exec would in the agent's container (its
// env, no flags) and with --node from outside.
func statusInPod(t *testing.T, bin string, env []string, node string) {
	t.Helper()
	for _, args := range [][]string{{"status"}, {"status", "--node", node}} {
		cmd := exec.Command(filepath.Join(bin, "myelin"), args...)
		if len(args) == 1 {
			cmd.Env = env
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), node) {
			t.Errorf("myelin %v: %v\n%s", args, err, out)
		}
	}
}

func capList(c corev1.Container) string {
	var caps []string
	for _, c := range c.SecurityContext.Capabilities.Add {
		caps = append(caps, "+"+strings.ToLower(string(c)))
	}
	return strings.Join(caps, ",")
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the chart's account.
func serviceAccountKubeconfig(t *testing.T, kubectl string, paths labplan.Paths) string {
	t.Helper()
	token, err := run(t, nil, kubectl, "create", "token", "myelin", "-n", "kube-system")
	if err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, token)
	}
	server, err := run(t, nil, kubectl, "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "apiVersion: v1\nkind: Config\nclusters: [{name: lab, cluster: {server: " + server + ", insecure-skip-tls-verify: true}}]\n" +
		"users: [{name: sa, user: {token: " + strings.TrimSpace(token) + "}}]\n" +
		"contexts: [{name: sa, context: {cluster: lab, user: sa}}]\ncurrent-context: sa\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkJSONLogs: every line the agent wrote to stdout is a JSON object with a level.
func checkJSONLogs(t *testing.T, out string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line["level"] == nil {
			t.Errorf("log line is not JSON with a level: %q", sc.Text())
		}
		n++
	}
	if n == 0 {
		t.Error("the agent logged nothing to stdout")
	}
}

// waitFor polls cond until it holds; the agent exiting first fails the test.
func waitFor(t *testing.T, exited <-chan error, log *syncBuffer, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("agent exited (%v) before %s:\n%s", err, what, log.String())
		case <-ctx.Done():
			t.Fatalf("no %s within 2 minutes:\n%s", what, log.String())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// syncBuffer is a bytes.Buffer the agent's output is copied into while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cleanupAsPod runs the chart's cleanup mode on lab node 1 (its container's args, less
// --hold, with the chart's capabilities) after agentAsPod, and checks that nothing
// named by myelin is left on the node: conflist, plugin, pins, state, the VXLAN
// device, the iptables masquerade chain; and that it wrote the file its readiness
// probe tests.
func cleanupAsPod(t *testing.T, bin string, c corev1.Container) {
	t.Helper()
	node := labplan.NodeName(1)
	inNode := func(argv ...string) (string, error) {
		return run(t, nil, "nsenter", append([]string{"--net=" + labplan.NetNSPath(node)}, argv...)...)
	}
	if out, err := inNode("iptables", "-w", "-t", "nat", "-S", "MYELIN-POSTROUTING"); err != nil {
		t.Fatalf("before cleanup the agent's masquerade chain should exist: %v\n%s", err, out)
	}
	args := []string{"setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all," + capList(c), "--",
		filepath.Join(bin, "myelin-agent")}
	done := filepath.Join(t.TempDir(), "cleanup", "done") // the pod's emptyDir
	for _, a := range nodeArgs(c, bin, node) {
		if strings.HasPrefix(a, "--cleanup-done-file=") {
			a = "--cleanup-done-file=" + done
		}
		if a != "--hold" {
			args = append(args, a)
		}
	}
	if out, err := inNode(args...); err != nil {
		t.Fatalf("myelin-agent --cleanup: %v\n%s", err, out)
	}
	if _, err := os.Stat(done); err != nil {
		t.Errorf("after cleanup the readiness file (--cleanup-done-file) is missing: %v", err)
	}
	for _, flag := range []string{"--bpffs-dir", "--state-dir"} {
		dir := strings.ReplaceAll(arg(c, flag), "$(NODE_NAME)", node)
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			t.Errorf("after cleanup %s (%s) still holds %v", dir, flag, entries)
		}
	}
	// The CNI dirs are the node's, shared with the lab's bridge CNI: myelin's files go,
	// the other network's conflist stays.
	confDir := strings.ReplaceAll(arg(c, "--cni-conf-dir"), "$(NODE_NAME)", node)
	binDir := strings.ReplaceAll(arg(c, "--cni-bin-dir"), "$(NODE_NAME)", node)
	for _, f := range []string{filepath.Join(confDir, nodelayout.CNIConfFile), filepath.Join(binDir, "myelin-cni")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("after cleanup %s still exists", f)
		}
	}
	if _, err := os.Stat(filepath.Join(confDir, "10-"+bridge.NetworkName+".conflist")); err != nil {
		t.Errorf("cleanup removed another network's conflist: %v", err)
	}
	if out, err := inNode("ip", "link", "show", "myelin_vxlan"); err == nil {
		t.Errorf("after cleanup myelin_vxlan still exists:\n%s", out)
	}
	if out, err := inNode("ip", "-4", "addr", "show", "dev", "lo", "label", "lo:myelinhealth"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("after cleanup the node health address (lo:myelinhealth) is still there: %v\n%s", err, out)
	}
	if out, err := inNode("iptables", "-w", "-t", "nat", "-S", "MYELIN-POSTROUTING"); err == nil {
		t.Errorf("after cleanup MYELIN-POSTROUTING still exists:\n%s", out)
	}
}
