package install

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
	"github.com/myelin-net/myelin/internal/version"
)

// kubectlBin is the pinned kubectl scripts/build-k8s.sh builds.
func kubectlBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(lab.KubeBinDir(), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		testenv.Skipf(t, "needs kubectl %s (make setup builds it): %v", lab.KubeVersion, err)
	}
	return bin
}

// labUp builds myelin and brings up a one-node lab with the reference bridge CNI: a
// real apiserver to check the chart against (no myelin runs in it).
func labUp(t *testing.T) (labplan.Paths, string) {
	t.Helper()
	testenv.RequireRoot(t, "run a lab (network namespaces, a real control plane)")
	testenv.LockLab(t) // test/e2e brings up labs too, in parallel with this package
	paths := labplan.Paths{Dir: labplan.DefaultDir}
	if lab.Running(paths) {
		t.Fatal("a lab is already running on this machine; run myelin lab down first")
	}
	if err := lab.CheckStale(paths); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if out, err := run(t, nil, "go", "build", "-tags", version.BuildTags, "-o", bin+"/", "github.com/myelin-net/myelin/cmd/..."); err != nil {
		t.Fatalf("build myelin: %v\n%s", err, out)
	}
	myelin := filepath.Join(bin, "myelin")
	t.Cleanup(func() {
		if out, err := run(t, nil, myelin, "lab", "down"); err != nil {
			t.Errorf("myelin lab down: %v\n%s", err, out)
		}
	})
	if out, err := run(t, nil, myelin, "lab", "up", "--nodes", "1", "--cni", "bridge"); err != nil {
		t.Fatalf("myelin lab up: %v\n%s", err, out)
	}
	return paths, bin
}

// TestLabHelmInstall checks the chart against a real apiserver: every rendered object
// passes a server-side dry run, also with the relay, the UI and TLS; installed, its
// account may do exactly what docs/install.md says; a second install is refused; the
// agent runs with the pod's args, capabilities and account (agentAsPod); uninstall
// removes its objects.
// The DaemonSet selects no node here (the lab kubelet runs no containers): the agent
// pods themselves run in the containerd lab's e2e test.
func TestLabHelmInstall(t *testing.T) {
	helmBin, kubectl := helm(t), kubectlBin(t)
	paths, bin := labUp(t)
	t.Setenv("KUBECONFIG", paths.Kubeconfig())
	// BPF host routing needs BPF masquerade: iptables masquerade makes host-routing
	// auto fall back, which the agent must report as an Event.
	sets := append(slices.Clone(labSets), "bpf.masquerade=false")
	setArgs := func(args ...string) []string {
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return append(args, "--set-string", "nodeSelector.myelin-test-selects-no-node=true")
	}

	// Also with the relay, the UI and TLS: their pods' security contexts and the
	// Secret's mode go through the apiserver's validation too.
	for _, more := range [][]string{nil, {"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true",
		"hubble.tls.secretName=hubble-tls"}} {
		args := setArgs("template", "myelin", chartDir(), "-n", "kube-system", "--include-crds")
		for _, s := range more {
			args = append(args, "--set", s)
		}
		manifest, err := run(t, nil, helmBin, args...)
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", more, err, manifest)
		}
		if out, err := run(t, []byte(manifest), kubectl, "apply", "--dry-run=server", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply --dry-run=server of the rendered chart %v: %v\n%s", more, err, out)
		}
	}

	if out, err := run(t, nil, helmBin, setArgs("install", "myelin", chartDir(), "-n", "kube-system")...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	checkCanI(t, kubectl)
	checkSecondInstallRefused(t, helmBin, setArgs)
	agentAsPod(t, bin, paths, kubectl, daemonSet(t, sets...).Spec.Template.Spec.Containers[0])
	cleanupAsPod(t, bin, daemonSet(t, append(sets, "cleanup=true")...).Spec.Template.Spec.Containers[0])
	checkHubbleTLSKept(t, helmBin, kubectl, setArgs) // last: its ConfigMap names TLS files the host lacks

	if out, err := run(t, nil, helmBin, "uninstall", "myelin", "-n", "kube-system", "--wait"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	for _, obj := range []string{"daemonset/myelin", "serviceaccount/myelin", "configmap/myelin-config", "secret/myelin-hubble-tls", "secret/myelin-hubble-relay-tls", "secret/myelin-hubble-ui-tls", "role/myelin-agent",
		"rolebinding/myelin-agent", "clusterrole/myelin-agent", "clusterrolebinding/myelin-agent"} {
		if out, err := run(t, nil, kubectl, "get", "-n", "kube-system", obj); err == nil {
			t.Errorf("%s still exists after helm uninstall:\n%s", obj, out)
		}
	}
}

// checkHubbleTLSKept: an upgrade turning hubble.tls.enabled on without a secretName
// installs the generated Secrets (myelin-hubble-tls, -relay-tls, -ui-tls); a second
// upgrade keeps their files (the chart looks them up: new ones would split agents still
// on the old CA from the relay during the rollout), one with another serverName
// replaces them, and so does one finding only myelin-hubble-tls (an install from a
// chart before the per-role certificates: the CA's key is not kept, so all are new).
func checkHubbleTLSKept(t *testing.T, helmBin, kubectl string, setArgs func(...string) []string) {
	t.Helper()
	upgrade := func(server string, sets ...string) map[string][]byte {
		t.Helper()
		args := setArgs("upgrade", "myelin", chartDir(), "-n", "kube-system", "--set", "hubble.tls.enabled=true")
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := run(t, nil, helmBin, args...); err != nil {
			t.Fatalf("helm upgrade with hubble.tls.enabled %v: %v\n%s", sets, err, out)
		}
		all := map[string][]byte{} // "<secret>/<file>"
		for _, r := range generatedTLSRoles(server) {
			out, err := run(t, nil, kubectl, "get", "-n", "kube-system", "secret", r.secret, "-o", "json")
			if err != nil {
				t.Fatalf("get the generated Secret %s: %v\n%s", r.secret, err, out)
			}
			var sec corev1.Secret
			if err := json.Unmarshal([]byte(out), &sec); err != nil {
				t.Fatal(err)
			}
			files := secretFiles(t, sec)
			checkHubbleTLSFiles(t, files, r.name)
			for k, v := range files {
				all[r.secret+"/"+k] = v
			}
		}
		return all
	}
	first := upgrade("hubble.myelin.local")
	if again := upgrade("hubble.myelin.local"); !maps.EqualFunc(first, again, bytes.Equal) {
		t.Errorf("a second upgrade replaced the generated Hubble TLS files: the agents still on the old CA could not reach the relay")
	}
	renamed := upgrade("agents.example", "hubble.tls.serverName=agents.example")
	if bytes.Equal(renamed["myelin-hubble-tls/tls.crt"], first["myelin-hubble-tls/tls.crt"]) {
		t.Errorf("an upgrade with another hubble.tls.serverName kept the certificate for the old name")
	}
	// The layout of a chart before the per-role certificates: only myelin-hubble-tls.
	if out, err := run(t, nil, kubectl, "delete", "-n", "kube-system", "secret", "myelin-hubble-relay-tls", "myelin-hubble-ui-tls"); err != nil {
		t.Fatalf("delete the relay's and the UI's Secrets: %v\n%s", err, out)
	}
	if old := upgrade("agents.example", "hubble.tls.serverName=agents.example"); bytes.Equal(old["myelin-hubble-tls/ca.crt"], renamed["myelin-hubble-tls/ca.crt"]) {
		t.Errorf("an upgrade finding only myelin-hubble-tls kept its CA: the relay's and the UI's certificates must come from a new CA, as its key is not kept")
	}
}

// checkSecondInstallRefused: another release in another namespace fails at render
// with the chart's message; another release in kube-system fails at Helm's ownership
// check on the objects the first one owns.
func checkSecondInstallRefused(t *testing.T, helmBin string, setArgs func(...string) []string) {
	t.Helper()
	out, err := run(t, nil, helmBin, setArgs("install", "other", chartDir(), "-n", "other", "--create-namespace")...)
	if want := "myelin must be installed in namespace kube-system"; err == nil || !strings.Contains(out, want) {
		t.Errorf("second install in namespace other: err %v, output %q; want a refusal saying %q", err, out, want)
	}
	t.Logf("second install in namespace other: %s", out)
	out, err = run(t, nil, helmBin, setArgs("install", "second", chartDir(), "-n", "kube-system")...)
	if want := `exists and cannot be imported into the current release`; err == nil || !strings.Contains(out, want) ||
		!strings.Contains(out, `current value is "myelin"`) {
		t.Errorf("second release in kube-system: err %v, output %q; want Helm's ownership refusal naming release myelin", err, out)
	}
	t.Logf("second release in kube-system: %s", out)
}

// canIRow matches a resource row of kubectl auth can-i --list.
var canIRow = regexp.MustCompile(`^(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$`)

// checkCanI compares what the agent's ServiceAccount may do in kube-system with the
// table in docs/install.md.
func checkCanI(t *testing.T, kubectl string) {
	t.Helper()
	out, err := run(t, nil, kubectl, "auth", "can-i", "--list", "-n", "kube-system", "--as", "system:serviceaccount:kube-system:myelin")
	if err != nil {
		t.Fatalf("kubectl auth can-i --list: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if m := canIRow.FindStringSubmatch(line); m != nil && m[1] != "Resources" {
			got = append(got, permission(m[1], m[2], m[3]))
		}
	}
	t.Logf("kubectl auth can-i --list as the agent:\n%s", out)
	want := documentedPermissions(t)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kubectl auth can-i --list as the agent:\n%s\ndocs/install.md documents:\n%s\nkubectl said:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
}

// permission is one comparable line: resource, resource names, sorted verbs.
func permission(resource, names, verbs string) string {
	v := strings.Fields(strings.NewReplacer(",", " ", "`", "").Replace(verbs))
	slices.Sort(v)
	return resource + " names=[" + strings.TrimSpace(strings.ReplaceAll(names, "`", "")) + "] " + strings.Join(v, " ")
}

// documentedPermissions parses the table between the can-i markers in docs/install.md:
// | `resource` | `names` | `verb` `verb` | why |.
func documentedPermissions(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- can-i:begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- can-i:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/install.md has no <!-- can-i:begin --> ... <!-- can-i:end --> table")
	}
	var want []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		want = append(want, permission(strings.Trim(strings.TrimSpace(cells[0]), "`"), cells[1], cells[2]))
	}
	slices.Sort(want)
	return want
}
