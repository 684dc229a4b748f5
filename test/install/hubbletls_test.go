package install

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/hubble"
)

// hubble.tls.enabled mounts the Secret into the agents and the relay, gives the agents
// hubble-tls-* keys they accept and the relay the matching --tls-* / --peer-tls-* flags;
// with secretName it generates no Secret (TestChartHubbleTLSGenerated: without).
func TestChartHubbleTLS(t *testing.T) {
	sets := []string{"hubble.relay.enabled=true", "hubble.tls.enabled=true", "hubble.tls.secretName=my-hubble-tls", "hubble.tls.serverName=agents.example"}
	objs := objects(t, template(t, sets...))
	cm := find(t, objs, "ConfigMap", config.ConfigMapName)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	c, err := config.Resolve(config.Source{Name: "chart", Values: data})
	if err != nil {
		t.Fatalf("the TLS ConfigMap is refused by the agent: %v", err)
	}
	if c.HubbleTLSCertFile != "/etc/myelin/hubble-tls/tls.crt" || c.HubbleTLSKeyFile != "/etc/myelin/hubble-tls/tls.key" ||
		len(c.HubbleTLSClientCAFiles) != 1 || c.HubbleTLSClientCAFiles[0] != "/etc/myelin/hubble-tls/ca.crt" {
		t.Errorf("agent TLS config %q %q %q: want the files of /etc/myelin/hubble-tls", c.HubbleTLSCertFile, c.HubbleTLSKeyFile, c.HubbleTLSClientCAFiles)
	}
	if len(c.HubbleTLSClientNames) != 0 {
		t.Errorf("with the user's Secret (one pair for every role) the agents check client names %q, want none", c.HubbleTLSClientNames)
	}
	ds := daemonSet(t, sets...)
	checkTLSVolume(t, "agent", ds.Spec.Template.Spec, "agent", 0o400)
	// Cleanup pods serve no Hubble API: the key stays out of them.
	for _, v := range daemonSet(t, append(sets, "cleanup=true")...).Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("cleanup=true with hubble.tls.enabled: volume %s mounts Secret %s, want none", v.Name, v.Secret.SecretName)
		}
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", "hubble-relay").Object, &dep); err != nil {
		t.Fatal(err)
	}
	checkTLSVolume(t, "relay", dep.Spec.Template.Spec, "hubble-relay", 0o440)
	rc := dep.Spec.Template.Spec.Containers[0]
	for flag, want := range map[string]string{
		"--tls-cert-file": "/etc/myelin/hubble-tls/tls.crt", "--tls-key-file": "/etc/myelin/hubble-tls/tls.key",
		"--tls-client-ca-files": "/etc/myelin/hubble-tls/ca.crt", "--peer-tls-ca-file": "/etc/myelin/hubble-tls/ca.crt",
		"--peer-tls-cert-file": "/etc/myelin/hubble-tls/tls.crt", "--peer-tls-key-file": "/etc/myelin/hubble-tls/tls.key",
		"--peer-tls-server-name": "agents.example",
	} {
		if got := arg(rc, flag); got != want {
			t.Errorf("relay %s=%q, want %q", flag, got, want)
		}
	}
	if got := arg(rc, "--tls-client-names"); got != "" {
		t.Errorf("with the user's Secret the relay has --tls-client-names=%s, want none (the UI presents the same pair)", got)
	}
	plain := find(t, objects(t, template(t)), "ConfigMap", config.ConfigMapName)
	if d, _, _ := unstructured.NestedStringMap(plain.Object, "data"); d["hubble-tls-cert-file"] != "" {
		t.Errorf("default values set hubble-tls-cert-file %q: TLS is off unless hubble.tls.enabled", d["hubble-tls-cert-file"])
	}
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			t.Errorf("with hubble.tls.secretName the chart renders Secret %s: the user's Secret is used, none generated", o.GetName())
		}
	}
}

// hubble.tls.enabled without secretName generates a CA and one certificate per role
// (before, one certificate that every agent, the relay and the UI held, so root on
// any node read every node's flows with its agent's key), each in its own Secret
// mounted only into its role's pods: myelin-hubble-tls the agents' (for serverName),
// myelin-hubble-relay-tls the relay's (relay.<serverName>), myelin-hubble-ui-tls the
// UI's (ui.<serverName>). The agents admit only the relay's name, the relay only the
// UI's, so an agent's certificate opens neither. A helm template has no cluster to
// look up, so each render generates new files; the reuse of installed Secrets' files
// is TestLabHelmInstall's (checkHubbleTLSKept).
func TestChartHubbleTLSGenerated(t *testing.T) {
	sets := []string{"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true", "hubble.tls.serverName=agents.example"}
	objs := objects(t, template(t, sets...))
	certs := map[string]*x509.Certificate{} // role → its certificate
	var ca []byte
	for _, r := range generatedTLSRoles("agents.example") {
		var sec corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Secret", r.secret).Object, &sec); err != nil {
			t.Fatal(err)
		}
		files := secretFiles(t, sec)
		certs[r.role] = checkHubbleTLSFiles(t, files, r.name)
		if ca == nil {
			ca = files["ca.crt"]
		} else if !bytes.Equal(ca, files["ca.crt"]) {
			t.Errorf("Secret %s has another ca.crt than myelin-hubble-tls: the roles could not verify each other", r.secret)
		}
		for _, o := range generatedTLSRoles("agents.example") {
			if o.role != r.role && certs[r.role].VerifyHostname(o.name) == nil {
				t.Errorf("the %s certificate also carries %s, the %s's name", r.role, o.name, o.role)
			}
		}
		if got := sec.Annotations["myelin.io/hubble-server-name"]; got != "agents.example" {
			t.Errorf("generated Secret %s annotated with server name %q, want agents.example (an upgrade compares it)", r.secret, got)
		}
	}
	if n := notes(t, sets...); !strings.Contains(n, "generated Secrets kube-system/myelin-hubble-tls") || !strings.Contains(n, "--tls-server-name relay.agents.example") {
		t.Errorf("NOTES with generated Hubble TLS Secrets do not say where they are and how to reach the relay:\n%s", n)
	}
	if n := notes(t, append(sets, "hubble.tls.secretName=mine")...); strings.Contains(n, "myelin-hubble-tls") {
		t.Errorf("NOTES with the user's Secret name a generated one:\n%s", n)
	}

	checkRoleTLS(t, sets, objs, generatedTLSRoles("agents.example"), certs)

	if out, failed := helmTemplate(t, "--set", strings.Join(append(sets, "hubble.tls.serverName=*.agents.example"), ",")); !failed ||
		!strings.Contains(out, "not wildcards") {
		t.Errorf("a wildcard serverName with generated certificates rendered, or failed without saying why:\n%s", out)
	}
}

// checkRoleTLS checks a render (objs, of sets) with one Secret per role: each pod
// mounts its role's Secret (roles[i].secret) and no other, the agents admit only the
// relay's certificate and the relay only the UI's (certs: each role's), the UI checks
// the relay's name and the relay the agents'.
func checkRoleTLS(t *testing.T, sets []string, objs []*unstructured.Unstructured, roles []tlsRole, certs map[string]*x509.Certificate) {
	t.Helper()
	// Each pod mounts its role's Secret and no other.
	ds := daemonSet(t, sets...)
	checkTLSVolumeOf(t, "agent", ds.Spec.Template.Spec, "agent", 0o400, roles[0].secret)
	checkOnlySecret(t, "agent", ds.Spec.Template.Spec, roles[0].secret)
	deps := map[string]appsv1.Deployment{}
	for _, r := range roles[1:] {
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", r.pod).Object, &dep); err != nil {
			t.Fatal(err)
		}
		checkTLSVolumeOf(t, r.pod, dep.Spec.Template.Spec, r.pod, 0o440, r.secret)
		checkOnlySecret(t, r.pod, dep.Spec.Template.Spec, r.secret)
		deps[r.role] = dep
	}

	// The agents admit only the relay's certificate, the relay only the UI's.
	cm := find(t, objs, "ConfigMap", config.ConfigMapName)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	c, err := config.Resolve(config.Source{Name: "chart", Values: data})
	if err != nil {
		t.Fatalf("the TLS ConfigMap is refused by the agent: %v", err)
	}
	rc := deps["relay"].Spec.Template.Spec.Containers[0]
	relayNames := strings.Split(arg(rc, "--tls-client-names"), ",")
	for _, check := range []struct {
		server string
		names  []string
		admits string
	}{
		{"agents (hubble-tls-client-names)", c.HubbleTLSClientNames, "relay"},
		{"relay (--tls-client-names)", relayNames, "ui"},
	} {
		for role, cert := range certs {
			if got := hubble.ClientNameAllowed(cert, check.names); got != (role == check.admits) {
				t.Errorf("%s with client names %q: admits the %s certificate %v, want %v", check.server, check.names, role, got, role == check.admits)
			}
		}
	}
	// The UI checks the relay's certificate for its name.
	if got := arg(deps["ui"].Spec.Template.Spec.Containers[0], "--tls-server-name"); got != roles[1].name {
		t.Errorf("ui --tls-server-name=%q, want %s (the relay's certificate)", got, roles[1].name)
	}
	if got := arg(rc, "--peer-tls-server-name"); got != roles[0].name {
		t.Errorf("relay --peer-tls-server-name=%q, want %s (the agents' certificate)", got, roles[0].name)
	}
}

// hubble.tls.roleSecrets: the user's own Secret per role (here holding what the
// chart generated, as cert-manager would issue them for those names). The chart
// generates no Secret, each pod mounts its role's, and the client names are checked
// as with the generated ones. All three or none, never beside secretName.
func TestChartHubbleTLSRoleSecrets(t *testing.T) {
	base := []string{"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true", "hubble.tls.serverName=agents.example"}
	certs := map[string]*x509.Certificate{}
	generated := objects(t, template(t, base...))
	roles := generatedTLSRoles("agents.example")
	sets := slices.Clone(base)
	for i, r := range roles {
		var sec corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, generated, "Secret", r.secret).Object, &sec); err != nil {
			t.Fatal(err)
		}
		certs[r.role] = checkHubbleTLSFiles(t, secretFiles(t, sec), r.name)
		roles[i].secret = "mine-" + r.role
		sets = append(sets, "hubble.tls.roleSecrets."+r.role+"=mine-"+r.role)
	}
	objs := objects(t, template(t, sets...))
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			t.Errorf("with hubble.tls.roleSecrets the chart renders Secret %s: the user's are used, none generated", o.GetName())
		}
	}
	checkRoleTLS(t, sets, objs, roles, certs)
	if n := notes(t, sets...); !strings.Contains(n, "kube-system/mine-agent") || strings.Contains(n, "myelin-hubble-tls") {
		t.Errorf("NOTES with hubble.tls.roleSecrets do not name the user's Secrets, or name a generated one:\n%s", n)
	}

	for _, c := range []struct {
		sets []string
		want string
	}{
		{append(slices.Clone(base), "hubble.tls.roleSecrets.agent=a", "hubble.tls.roleSecrets.ui=u"), "hubble.tls.roleSecrets sets agent, ui only"},
		{append(slices.Clone(sets), "hubble.tls.secretName=one"), "hubble.tls.secretName and hubble.tls.roleSecrets are both set"},
		{append(slices.Clone(sets), "hubble.tls.serverName=*.agents.example"), "not wildcards"},
	} {
		if out, failed := helmTemplate(t, "--set", strings.Join(c.sets, ",")); !failed || !strings.Contains(out, c.want) {
			t.Errorf("--set %v rendered, or failed without saying %q:\n%s", c.sets, c.want, out)
		}
	}
}

// tlsRole is one role's generated certificate: the Secret, the name it carries, the
// Deployment (relay, UI) or DaemonSet that mounts it.
type tlsRole struct{ role, secret, name, pod string }

// generatedTLSRoles are the generated Secrets for serverName, the agents' first.
func generatedTLSRoles(server string) []tlsRole {
	return []tlsRole{
		{"agent", "myelin-hubble-tls", server, "myelin"},
		{"relay", "myelin-hubble-relay-tls", "relay." + server, "hubble-relay"},
		{"ui", "myelin-hubble-ui-tls", "ui." + server, "hubble-ui"},
	}
}

// checkOnlySecret: the pod mounts Secret secret and no other Secret.
func checkOnlySecret(t *testing.T, what string, pod corev1.PodSpec, secret string) {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName != secret {
			t.Errorf("%s pod mounts Secret %s: want only its own, %s", what, v.Secret.SecretName, secret)
		}
		if v.Projected != nil {
			t.Errorf("%s pod has projected volume %s: want only Secret %s", what, v.Name, secret)
		}
	}
}

// secretFiles returns a Secret's ca.crt, tls.crt and tls.key, failing when one is missing.
func secretFiles(t *testing.T, sec corev1.Secret) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		v, ok := sec.Data[k]
		if !ok || len(v) == 0 {
			t.Fatalf("Secret %s lacks %s", sec.Name, k)
		}
		files[k] = v
	}
	return files
}

// checkHubbleTLSFiles: tls.crt is signed by ca.crt for name, usable as a server and
// as a client certificate, and tls.key is its key; it returns the certificate.
func checkHubbleTLSFiles(t *testing.T, files map[string][]byte, name string) *x509.Certificate {
	t.Helper()
	if _, err := tls.X509KeyPair(files["tls.crt"], files["tls.key"]); err != nil {
		t.Errorf("tls.crt and tls.key for %s are not a pair: %v", name, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(files["ca.crt"]) {
		t.Fatalf("ca.crt holds no PEM certificate:\n%s", files["ca.crt"])
	}
	block, _ := pem.Decode(files["tls.crt"])
	if block == nil {
		t.Fatalf("tls.crt for %s holds no PEM block", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("tls.crt for %s, usage %v: %v", name, usage, err)
		}
	}
	return cert
}

// checkTLSVolume: the pod mounts Secret my-hubble-tls read-only at /etc/myelin/hubble-tls
// into the named container, its files (the private key among them) with mode: 0400 for
// the agent (root, their owner), 0440 for the non-root relay and UI (they read them as
// members of the pod's fsGroup, the files' group; TestChartHubblePodsHardened), never
// readable by other users of the pod.
func checkTLSVolume(t *testing.T, what string, pod corev1.PodSpec, container string, mode int32) {
	t.Helper()
	checkTLSVolumeOf(t, what, pod, container, mode, "my-hubble-tls")
}

// checkTLSVolumeOf is checkTLSVolume for the Secret named secret.
func checkTLSVolumeOf(t *testing.T, what string, pod corev1.PodSpec, container string, mode int32, secret string) {
	t.Helper()
	found := false
	for _, v := range pod.Volumes {
		if v.Name == "hubble-tls" && v.Secret != nil && v.Secret.SecretName == secret {
			found = true
			if m := v.Secret.DefaultMode; m == nil || *m != mode {
				t.Errorf("%s pod: Secret volume hubble-tls defaultMode %s, want %#o", what, fileMode(m), mode)
			}
		}
	}
	if !found {
		t.Errorf("%s pod: no volume hubble-tls from Secret %s in %+v", what, secret, pod.Volumes)
	}
	for _, c := range pod.Containers {
		if c.Name != container {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == "hubble-tls" && m.MountPath == "/etc/myelin/hubble-tls" && m.ReadOnly {
				return
			}
		}
		t.Errorf("%s container %s mounts %+v: want hubble-tls read-only at /etc/myelin/hubble-tls", what, container, c.VolumeMounts)
		return
	}
	t.Errorf("%s pod has no container %s", what, container)
}

// With hubble.tls.enabled the relay requires client certificates, so the UI gets the
// same Secret and --tls-* flags for the relay (their name checked against
// hubble.tls.serverName, as the relay's own certificate carries it); without TLS it
// has neither.
func TestChartHubbleUITLS(t *testing.T) {
	sets := []string{"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true",
		"hubble.tls.secretName=my-hubble-tls", "hubble.tls.serverName=agents.example"}
	ui := func(sets ...string) appsv1.Deployment {
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objects(t, template(t, sets...)), "Deployment", "hubble-ui").Object, &dep); err != nil {
			t.Fatal(err)
		}
		return dep
	}
	dep := ui(sets...)
	checkTLSVolume(t, "ui", dep.Spec.Template.Spec, "hubble-ui", 0o440)
	c := dep.Spec.Template.Spec.Containers[0]
	for flag, want := range map[string]string{
		"--tls-ca-file": "/etc/myelin/hubble-tls/ca.crt", "--tls-client-cert-file": "/etc/myelin/hubble-tls/tls.crt",
		"--tls-client-key-file": "/etc/myelin/hubble-tls/tls.key", "--tls-server-name": "agents.example",
	} {
		if got := arg(c, flag); got != want {
			t.Errorf("ui %s=%q, want %q", flag, got, want)
		}
	}
	plain := ui("hubble.relay.enabled=true", "hubble.ui.enabled=true")
	for _, a := range plain.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--tls-") {
			t.Errorf("ui without hubble.tls.enabled has %s", a)
		}
	}
	if v := plain.Spec.Template.Spec.Volumes; len(v) != 0 {
		t.Errorf("ui without hubble.tls.enabled mounts %+v", v)
	}
	if out, err := run(t, nil, helm(t), append([]string{"lint", "--strict", "--namespace", "kube-system", chartDir()},
		"--set", strings.Join(sets, ","))...); err != nil {
		t.Errorf("helm lint --strict with TLS and the UI: %v\n%s", err, out)
	}
}

// hubble.listenAddress left empty (the default) opens the agents' Hubble TCP port
// only for what needs it: ":4244" with the relay (it reads the port) or TLS (it
// protects the port), no port at all otherwise, so a default install serves no
// node's flows without authentication (before, ":4244" was always open, and the
// relay or TLS with an empty address failed the install). NOTES warns about the
// open port only when there is one; an explicit address is kept.
func TestChartHubbleListenAddress(t *testing.T) {
	for _, c := range []struct {
		name   string
		sets   []string
		want   string
		warned bool
	}{
		{name: "default", want: ""},
		{name: "relay", sets: []string{"hubble.relay.enabled=true"}, want: ":4244", warned: true},
		{name: "TLS", sets: []string{"hubble.tls.enabled=true", "hubble.tls.secretName=s"}, want: ":4244"},
		{name: "explicit", sets: []string{"hubble.listenAddress=:4300"}, want: ":4300", warned: true},
		{name: "hubble off", sets: []string{"hubble.enabled=false"}, want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cm := find(t, objects(t, template(t, c.sets...)), "ConfigMap", config.ConfigMapName)
			if got, _, _ := unstructured.NestedString(cm.Object, "data", "hubble-listen-address"); got != c.want {
				t.Errorf("helm template %v: hubble-listen-address %q, want %q", c.sets, got, c.want)
			}
			n := notes(t, c.sets...)
			if warned := strings.Contains(n, "WITHOUT authentication on"); warned != c.warned {
				t.Errorf("NOTES with %v: warns of the open Hubble port %v, want %v:\n%s", c.sets, warned, c.warned, n)
			}
		})
	}
}
