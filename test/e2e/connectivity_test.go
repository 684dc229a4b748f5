package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/sysdump"
)

// TestLabConnectivity runs `myelin connectivity test` on a 3-node native lab: every
// scenario passes (kube-dns is skipped, never passed, when the lab has none) and the
// namespace is gone afterwards. Then a deny-all NetworkPolicy appears in the test's
// namespace while it runs: the command fails naming the hop. Then `myelin sysdump`
// writes an archive holding every node's and the cluster's files, and no secret.
func TestLabConnectivity(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3")
	connectivityPasses(t, cs)
	t.Run("deny-all mid-way names the hop", func(t *testing.T) { connectivityDenyAll(t, cs) })
	t.Run("sysdump", func(t *testing.T) { sysdumpArchive(t, cs) })
	t.Run("bad input is one line", func(t *testing.T) { connectivityBadInput(t, cs) })
}

// connectivityBadInput: a user who may not create pods (the agent's identity), and a
// cluster named by --kubeconfig that has no myelin DaemonSet (the lab's agents are
// processes, not the chart's pods), each get one line.
func connectivityBadInput(t *testing.T, cs kubernetes.Interface) {
	for what, c := range map[string]struct{ kubeconfig, want string }{
		"no permission": {paths.ComponentKubeconfig(labmyelin.AgentUser), "permission denied: this user may not create namespaces"},
		"no myelin":     {paths.Kubeconfig(), "no myelin agents found"},
	} {
		out, err := myelin("connectivity", "test", "--kubeconfig", c.kubeconfig)
		if err == nil || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("%s: want one line with %q, got (%v):\n%s", what, c.want, err, out)
		}
	}
	out, err := myelin("connectivity", "test", "--namespace", "default")
	if err == nil || !strings.Contains(out, "namespace default already exists") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("--namespace default: want one line refusing it, got (%v):\n%s", err, out)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace default after connectivity test --namespace default: %v", err)
	}
	noTestNamespaces(t, cs)
}

// TestLabConnectivityTunnel: every scenario passes in VXLAN tunnel mode too (the MTU
// scenario then checks the tunnel overhead on the routes).
func TestLabConnectivityTunnel(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--profile", "tunnel")
	connectivityPasses(t, cs)
}

// connectivityPasses runs the command and checks every scenario passed, kube-dns is
// skipped (never passed) when absent, and the namespace is gone.
func connectivityPasses(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	start := time.Now()
	out, err := myelin("connectivity", "test")
	t.Logf("myelin connectivity test (%v):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("connectivity test failed: %v", err)
	}
	for _, name := range []string{"pod-to-pod/same-node", "pod-to-pod/cross-node", "pod-to-service/cluster-ip",
		"pod-to-service/node-port/myelin-node-1", "pod-to-service/node-port/myelin-node-2",
		"pod-to-service/node-port/myelin-node-3", "pod-to-service/local-traffic/myelin-node-3", "pod-to-host",
		"host-to-pod/same-node", "host-to-pod/cross-node", "pod-to-outside", "mtu/icmp-df", "fragments/icmp",
		"fragments/udp", "policy/denied", "policy/allowed"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s.*\spassed\s`).MatchString(out) {
			t.Errorf("scenario %s did not pass", name)
		}
	}
	if _, err := cs.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{}); apierrors.IsNotFound(err) &&
		!regexp.MustCompile(`(?m)^dns/service\s.*skipped: no kube-dns Service`).MatchString(out) {
		t.Errorf("without kube-dns the DNS scenario must be skipped with the reason")
	}
	noTestNamespaces(t, cs)
}

func noTestNamespaces(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	list, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: "myelin.io/connectivity-test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range list.Items {
		t.Errorf("namespace %s left behind (phase %s)", ns.Name, ns.Status.Phase)
	}
}

// connectivityDenyAll puts a deny-all NetworkPolicy into the test's namespace as soon
// as the command creates it, so every scenario runs under it.
func connectivityDenyAll(t *testing.T, cs kubernetes.Interface) {
	const ns = "myelin-connectivity-e2e-deny"
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-all"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
		for ctx.Err() == nil {
			if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, deny, metav1.CreateOptions{}); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("could not create the deny-all policy in %s", ns)
	}()
	out, err := myelin("connectivity", "test", "--namespace", ns, "--only", "pod-to-pod,policy")
	<-done
	t.Logf("under deny-all:\n%s", out)
	if err == nil {
		t.Fatalf("connectivity test passed under a deny-all NetworkPolicy")
	}
	for _, want := range []string{
		"FAIL pod-to-pod/same-node: from client (myelin-node-1, ",
		"FAIL pod-to-pod/cross-node: from client (myelin-node-1, ",
		"to server-b (myelin-node-3) ", "expected HTTP 200, got: ", "scenarios failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	eventually(t, time.Minute, "test namespace deleted", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "namespace still there"
	})
}

// sysdumpArchive runs myelin sysdump with a Secret and a pod with a secret-named env
// var, a plain one and a last-applied annotation in the cluster, and checks the archive's
// files, that it is 0600 and that none of the values is in it.
func sysdumpArchive(t *testing.T, cs kubernetes.Interface) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-secret"}, StringData: map[string]string{"password": "e2e-secret-value-1"}}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "envpod", Annotations: map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"e2e-secret-value-3"}}`}},
		Spec: corev1.PodSpec{NodeName: "myelin-node-2",
			Containers: []corev1.Container{{Name: "c", Image: "none", Command: []string{"sleep", "600"},
				Env: []corev1.EnvVar{{Name: "API_TOKEN", Value: "e2e-secret-value-2"},
					{Name: "DB_PASS", Value: "e2e-secret-value-4"}, {Name: "PLAIN", Value: "e2e-secret-value-5"}}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dump.tar.gz")
	out, err := myelin("sysdump", "-o", path, "--drops-for", "1s")
	t.Logf("myelin sysdump:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("archive %s: want mode -rw-------, got %v", path, statMode(st, err))
	}
	files := untar(t, path)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	want := []string{"manifest.json", "cluster/nodes.json", "cluster/pods.json", "cluster/services.json",
		"cluster/endpointslices.json", "cluster/networkpolicies.json", "cluster/nodeconfigs.json", "cluster/myelin-config.json"}
	for _, node := range []string{"myelin-node-1", "myelin-node-2", "myelin-node-3"} {
		for _, f := range []string{"status.json", "config.json", "services.json", "endpoints.json", "policy.json",
			"agent.log", "bpf-net.json", "bpf-links.json", "ip-route.txt"} {
			want = append(want, "nodes/"+node+"/"+f)
		}
	}
	for _, w := range want {
		if _, ok := files[w]; !ok {
			t.Errorf("archive lacks %s (has %v)", w, names)
		}
	}
	checkSysdumpContents(t, files)
}

func checkSysdumpContents(t *testing.T, files map[string]string) {
	t.Helper()
	if !strings.Contains(files["nodes/myelin-node-2/status.json"], "myelin-node-2") {
		t.Errorf("node 2's status does not name it")
	}
	if !strings.Contains(files["nodes/myelin-node-1/config.json"], "routing-mode") {
		t.Errorf("config.json lacks the configuration keys:\n%.500s", files["nodes/myelin-node-1/config.json"])
	}
	if !strings.Contains(files["cluster/nodes.json"], "myelin-node-3") || !strings.Contains(files["cluster/pods.json"], "envpod") {
		t.Errorf("cluster objects lack the nodes or pods")
	}
	maps := 0
	for name, body := range files {
		if strings.Contains(name, "/maps/") && strings.Contains(body, `"total"`) {
			maps++
		}
		if strings.Contains(name, "secret") {
			t.Errorf("archive holds %s", name)
		}
		for _, v := range []string{"e2e-secret-value-1", "e2e-secret-value-2", "e2e-secret-value-3", "e2e-secret-value-4", "e2e-secret-value-5"} {
			if strings.Contains(body, v) {
				t.Errorf("%s holds the secret value %s", name, v)
			}
		}
	}
	if maps == 0 {
		t.Errorf("no BPF map dump in the archive")
	}
}

func statMode(st os.FileInfo, err error) any {
	if err != nil {
		return err
	}
	return st.Mode().Perm()
}

// untar returns the archive's files by name below its one top directory.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := sysdump.ReadArchive(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		top, rest, _ := strings.Cut(e.Name, "/")
		if !strings.HasPrefix(top, "myelin-sysdump-") {
			t.Errorf("%s is outside the archive's top directory", e.Name)
		}
		files[rest] = string(e.Data)
	}
	return files
}
