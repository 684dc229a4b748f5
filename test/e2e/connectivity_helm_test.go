package e2e

import (
	"crypto/x509"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/myelin-net/myelin/internal/testpki"
)

// TestLabConnectivityHelm runs both commands as on a real cluster: kubelet +
// containerd nodes with myelin installed by the Helm chart (native routing). The
// connectivity test's pods run the myelin/test image and are probed through pods/exec;
// the sysdump reads every node from the chart's agent pods through pods/exec. The
// chart's relay and UI run too, with hubble.tls (hubblePodsReadTheirKey).
func TestLabConnectivityHelm(t *testing.T) {
	requireRoot(t)
	requireContainerd(t)
	helm := testenv.Helm(t)
	version := buildTestImages(t)
	cs := labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", "2")
	sets := append(append([]string{"image.tag=" + version}, helmLabSets...), helmModeSets["native"]...)
	// --wait returns once the relay and the UI are ready too: both read their key
	// before they listen, as non-root through the pod's fsGroup.
	sets = append(sets, "hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true",
		"hubble.tls.secretName="+hubbleTLSSecret(t))
	args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
	if out, err := helmRun(helm, args...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	waitAgentsReady(t, cs, 2, "myelin/agent:"+version)
	hubblePodsReadTheirKey(t)

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

// hubbleTLSSecret creates Secret kube-system/hubble-tls as docs/hubble.md ("TLS") asks:
// ca.crt, and tls.crt/tls.key for the chart's default hubble.tls.serverName with
// serverAuth and clientAuth, from a throwaway CA.
func hubbleTLSSecret(t *testing.T) string {
	t.Helper()
	pki := testpki.New(t)
	pki.Issue(t, "hubble", &x509.Certificate{DNSNames: []string{"hubble.myelin.local"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	if out, err := kubectl("-n", "kube-system", "create", "secret", "generic", "hubble-tls", "--from-file=tls.crt="+pki.File("hubble.crt"),
		"--from-file=tls.key="+pki.File("hubble.key"), "--from-file=ca.crt="+pki.File("ca.crt")); err != nil {
		t.Fatalf("create Secret hubble-tls: %v\n%s", err, out)
	}
	return "hubble-tls"
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
