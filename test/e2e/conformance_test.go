package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/conformance"
	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
)

// subsetFocus are the [sig-network] conformance tests `make test` runs
// (TestLabConformanceSubset), each matching one test: pod-to-pod HTTP and UDP across
// nodes, a ClusterIP and a NodePort Service; every DNS conformance test; the Proxy
// tests (the apiserver reaching pods: labplan.Plan.PodCIDRRoutes, and Services through
// their v1 Endpoints); the EndpointSlice tests that need the endpoints controller;
// hostPort (the chained portmap); NodePort session affinity from a pod to every
// node (NodePort SNAT of pod clients of other nodes).
var subsetFocus = []string{
	`Networking Granular Checks: Pods should function for node-pod communication: http`,
	`Networking Granular Checks: Pods should function for intra-pod communication: udp`,
	`Services should serve a basic endpoint from pods`,
	`Services should be able to create a functioning NodePort service`,
	`DNS should provide DNS for services`,
	`DNS should provide DNS for the cluster`,
	`DNS should provide /etc/hosts entries for the cluster`,
	`DNS should provide DNS for pods for Hostname`,
	`DNS should provide DNS for pods for Subdomain`,
	`DNS should provide DNS for ExternalName services`,
	`DNS should resolve DNS of partial qualified names for services`,
	`DNS should support configurable pod DNS nameservers`,
	`Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath`,
	`Proxy version v1 A set of valid responses are returned for both pod and service Proxy `,
	`Proxy version v1 should proxy through a service and a pod`,
	`EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service`,
	`EndpointSlice should create and delete Endpoints and EndpointSlices for a Service with a selector specified`,
	`HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol`,
	`Services should have session affinity work for NodePort service`,
	`Services should be able to switch session affinity for NodePort service`,
}

// TestLabConformanceSubset runs a few of Kubernetes' own [sig-network] conformance tests
// (e2e.test, built by make setup from the pinned k8s.io/kubernetes module) against a
// --runtime containerd lab with myelin installed by Helm (native routing, BPF host
// routing) and CoreDNS as kube-dns; first it checks a pod resolves a Service's name.
// Every focused test must pass, none may be skipped. make conformance runs the rest.
func TestLabConformanceSubset(t *testing.T) {
	suite := requireConformance(t)
	cs := conformanceLab(t, "native-bpf", 2)
	podResolvesService(t, cs)
	out := keptOutDir(t, "subset")
	res := runSuite(t, suite, conformance.Run{
		Focus: []string{`\[sig-network\] .*(` + strings.Join(subsetFocus, "|") + `).*\[Conformance\]`},
		Procs: 4, Timeout: suiteTimeout(t, 10*time.Minute), OutDir: out,
	})
	if len(res.Specs) != len(subsetFocus) || res.Passed() != len(subsetFocus) {
		t.Errorf("conformance subset: %s, want all %d focused tests run and passed\n%s", res.Summary(), len(subsetFocus), res.Details())
	}
}

// TestLabConformance is `make conformance`: one mode (MYELIN_CONFORMANCE=native-bpf,
// native-legacy, tunnel-bpf, tunnel-legacy or flannel, the Flannel + kube-proxy
// baseline) with the focus of docs/conformance.md (MYELIN_CONFORMANCE_FOCUS: full, the
// default; conformance, only [sig-network] [Conformance]; netpol, the NetworkPolicy
// suite; network, the Services, Networking, HostPort, Conntrack and DNS tests; re:<regular
// expression>, the tests it matches, e.g. one to run again), on MYELIN_CONFORMANCE_NODES
// nodes (default 2), results in MYELIN_CONFORMANCE_OUT (default conformance-results/<mode>). It passes when the suite
// ran; the per-test outcome is the report. Skipped unless MYELIN_CONFORMANCE is set.
func TestLabConformance(t *testing.T) {
	mode := os.Getenv("MYELIN_CONFORMANCE")
	if mode == "" {
		t.Skip("set MYELIN_CONFORMANCE to a mode (make conformance does)")
	}
	suite := requireConformance(t)
	out := os.Getenv("MYELIN_CONFORMANCE_OUT")
	if out == "" {
		out = filepath.Join("..", "..", "conformance-results", mode)
	}
	// Absolute: ginkgo runs e2e.test from its own directory, where a relative
	// KUBE_TEST_REPO_LIST is not found (every process panicked: 0/0 ran).
	out, err := filepath.Abs(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := 2
	if v := os.Getenv("MYELIN_CONFORMANCE_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > labplan.MaxNodes {
			t.Fatalf("MYELIN_CONFORMANCE_NODES=%q: use a number of nodes from 2 to %d (3 runs the tests that need a third node)", v, labplan.MaxNodes)
		}
		nodes = n
	}
	conformanceLab(t, mode, nodes)
	focus, set := conformance.FullFocus, os.Getenv("MYELIN_CONFORMANCE_FOCUS")
	switch set {
	case "", "full":
		set = "full"
	case "conformance":
		focus = conformance.FullFocus[:1]
	case "netpol":
		focus = conformance.FullFocus[1:2]
	case "network":
		focus = conformance.FullFocus[2:3]
	default:
		re, ok := strings.CutPrefix(set, "re:")
		if !ok || re == "" {
			t.Fatalf("MYELIN_CONFORMANCE_FOCUS=%q: use full, conformance, netpol, network or re:<regular expression> (a test's name, to run it again)", set)
		}
		focus = []string{re}
	}
	res := runSuite(t, suite, conformance.Run{
		Focus: focus, Skip: conformance.FullSkip,
		Procs: 4, Nodes: nodes, Timeout: suiteTimeout(t, 150*time.Minute), OutDir: out,
	})
	summary := fmt.Sprintf("mode %s, %d nodes, focus %s: %s in %s\n\n%s", mode, nodes, set, res.Summary(), res.Duration.Round(time.Second), res.Details())
	if err := os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(summary)
	if len(res.Specs) == 0 {
		t.Fatalf("the suite ran no test; see %s", out)
	}
}

// keptOutDir is a new directory for one suite run's output (e2e.log, report.json) that
// outlives the test, so a failure can be read afterwards:
// <tool cache>/conformance/<UTC time>-<name>, printed in the test log.
func keptOutDir(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(cni.ToolCache(), "conformance", time.Now().UTC().Format("20060102-150405")+"-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create the suite's output dir: %v", err)
	}
	t.Logf("the suite's output (e2e.log, report.json) is kept in %s", dir)
	return dir
}

// requireConformance needs e2e.test (make setup); in CI its absence fails the test. The
// e2e images are built by conformanceLab, which fails naming any still missing.
func requireConformance(t *testing.T) conformance.Suite {
	t.Helper()
	requireRoot(t)
	requireContainerd(t)
	testenv.Helm(t) // conformanceLab installs the chart with it
	suite := conformance.Suite{Binary: filepath.Join(lab.KubeBinDir(), "e2e.test"), Ginkgo: filepath.Join(lab.KubeBinDir(), "ginkgo"),
		Kubeconfig: paths.Kubeconfig()}
	if _, err := os.Stat(suite.Binary); err != nil {
		testenv.Skipf(t, "e2e.test not found at %s; build it with: make setup (scripts/build-e2e.sh)", suite.Binary)
	}
	return suite
}

// conformanceLab brings up a --runtime containerd lab of nodes nodes for mode: myelin
// installed by Helm (native or tunnel routing, bpf or legacy host routing), or Flannel
// with kube-proxy (iptables) for "flannel"; then CoreDNS and the e2e images.
func conformanceLab(t *testing.T, mode string, nodes int) kubernetes.Interface {
	t.Helper()
	version := buildTestImages(t)
	if out, err := myelin("images", "build", "--e2e"); err != nil {
		t.Fatalf("myelin images build --e2e: %v\n%s", err, out)
	}
	if err := (conformance.Suite{Binary: filepath.Join(lab.KubeBinDir(), "e2e.test")}).Check(cni.ToolCache()); err != nil {
		t.Fatal(err)
	}
	var cs kubernetes.Interface
	if mode == "flannel" {
		cs = labUp(t, "--runtime", "containerd", "--cni", "flannel", "--kube-proxy", "iptables", "--nodes", strconv.Itoa(nodes))
	} else {
		routing, hostRouting, ok := strings.Cut(mode, "-")
		if !ok || helmModeSets[routing] == nil || (hostRouting != "bpf" && hostRouting != "legacy") {
			t.Fatalf("conformance mode %q: use native-bpf, native-legacy, tunnel-bpf, tunnel-legacy or flannel", mode)
		}
		cs = labUp(t, "--runtime", "containerd", "--cni", "none", "--nodes", strconv.Itoa(nodes))
		sets := append(append([]string{"image.tag=" + version, "hostRouting=" + hostRouting}, helmLabSets...), helmModeSets[routing]...)
		args := append([]string{"install", "myelin", chartDir, "-n", "kube-system", "--wait", "--timeout", "5m"}, setFlags(sets)...)
		if out, err := helmRun(testenv.Helm(t), args...); err != nil {
			t.Fatalf("%s: helm install: %v\n%s", mode, err, out)
		}
		waitAgentsReady(t, cs, nodes, "myelin/agent:"+version)
	}
	var archives []string
	for _, image := range images.E2ENames {
		archives = append(archives, images.E2EArchive(cni.ToolCache(), image))
	}
	if out, err := myelin(append([]string{"lab", "import"}, archives...)...); err != nil {
		t.Fatalf("myelin lab import (the e2e images): %v\n%s", err, out)
	}
	if out, err := myelin("lab", "dns"); err != nil {
		t.Fatalf("myelin lab dns: %v\n%s", err, out)
	}
	return cs
}

// podResolvesService checks cluster DNS from a pod: a Service's short name, through the
// resolv.conf the kubelet wrote (clusterDNS 10.96.0.10, search default.svc.cluster.local),
// resolves to its ClusterIP (dig of the agnhost image, with the search path).
func podResolvesService(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	image := images.E2ERef(images.E2EAgnhost)
	containerPod(t, cs, "dns-srv", labplan.NodeName(1), image, map[string]string{"app": "dns-srv"}, "/agnhost", "netexec", "--http-port=8080")
	containerPod(t, cs, "dns-client", labplan.NodeName(2), image, nil, "sh", "-c", "exec sleep 3600")
	svc := createService(t, cs, "dns-srv", "dns-srv", nil)
	waitContainersRunning(t, cs, "dns-srv", "dns-client")
	out, err := kubectl("exec", "dns-client", "--", "cat", "/etc/resolv.conf")
	if err != nil || !strings.Contains(out, "nameserver 10.96.0.10") || !strings.Contains(out, "search default.svc.cluster.local") {
		t.Fatalf("the pod's resolv.conf: %v\n%s\nwant nameserver 10.96.0.10 and the cluster search path", err, out)
	}
	eventually(t, time.Minute, "dns-client resolves dns-srv", func(context.Context) (bool, string) {
		out, err := kubectl("exec", "dns-client", "--", "dig", "+short", "+search", "dns-srv")
		return err == nil && strings.TrimSpace(out) == svc.Spec.ClusterIP, fmt.Sprintf("%v %q, want %s", err, out, svc.Spec.ClusterIP)
	})
}

// suiteTimeout is at most limit, and ends the suite (which still reports) 2 minutes
// before go test's -timeout would kill the test without its cleanup (lab down).
func suiteTimeout(t *testing.T, limit time.Duration) time.Duration {
	if d, ok := t.Deadline(); ok {
		return min(limit, time.Until(d)-2*time.Minute)
	}
	return limit
}

// runSuite runs e2e.test and fails the test when it could not run at all.
func runSuite(t *testing.T, suite conformance.Suite, run conformance.Run) conformance.Result {
	t.Helper()
	res, err := suite.Run(context.Background(), run, testWriter{t})
	if err != nil {
		t.Fatalf("run e2e.test: %v", err)
	}
	return res
}

// testWriter sends the suite's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
