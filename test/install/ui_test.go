package install

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// hubble.ui.enabled renders the service map: `myelin ui` from the agent image reading
// the relay, a Service on port 80, its own ServiceAccount with no role and no token,
// probes that name an allowed Host; without the relay the install fails saying so;
// off (the default) renders nothing of it.
func TestChartHubbleUI(t *testing.T) {
	objs := objects(t, template(t, "hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.ui.allowedHosts={ui.example.org}"))
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", "hubble-ui").Object, &dep); err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if strings.Join(c.Command, " ") != "/usr/bin/myelin" || len(c.Args) == 0 || c.Args[0] != "ui" ||
		arg(c, "--listen") != "0.0.0.0:12000" || arg(c, "--server") != "hubble-relay.kube-system.svc:4245" {
		t.Errorf("ui container %v %v: want /usr/bin/myelin ui --listen=0.0.0.0:12000 --server=hubble-relay.kube-system.svc:4245", c.Command, c.Args)
	}
	for _, h := range []string{"hubble-ui", "hubble-ui.kube-system", "hubble-ui.kube-system.svc", "ui.example.org"} {
		if !slices.Contains(c.Args, "--allowed-host="+h) {
			t.Errorf("ui args %v: no --allowed-host=%s", c.Args, h)
		}
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || len(p.HTTPGet.HTTPHeaders) != 1 ||
			p.HTTPGet.HTTPHeaders[0].Name != "Host" || p.HTTPGet.HTTPHeaders[0].Value != "localhost" {
			t.Errorf("ui %s probe %+v: want GET /healthz with Host: localhost (the page refuses the pod IP as Host)", name, p)
		}
	}
	if spec.ServiceAccountName != "hubble-ui" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("ui ServiceAccount %q automount %v: want hubble-ui without a token", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	find(t, objs, "ServiceAccount", "hubble-ui")
	for _, o := range objs {
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if m, _ := s.(map[string]any); m["name"] == "hubble-ui" {
					t.Errorf("%s %s binds hubble-ui: the UI needs no Kubernetes API access", o.GetKind(), o.GetName())
				}
			}
		}
	}
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Service", "hubble-ui").Object, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[0].TargetPort != intstr.FromString("http") ||
		c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 12000 || svc.Spec.Selector["app.kubernetes.io/name"] != "hubble-ui" {
		t.Errorf("ui Service %+v, container ports %v: want port 80 -> 12000 selecting the UI", svc.Spec, c.Ports)
	}
	for _, o := range objects(t, template(t, "hubble.relay.enabled=true")) {
		if o.GetName() == "hubble-ui" {
			t.Errorf("hubble.ui.enabled unset renders %s hubble-ui: the UI is off by default", o.GetKind())
		}
	}
	out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system", "--set", "hubble.ui.enabled=true")
	if err == nil || !strings.Contains(out, "hubble.ui.enabled needs hubble.relay.enabled") {
		t.Errorf("ui without the relay: err %v, output %q; want a failure naming hubble.relay.enabled", err, out)
	}
	if out, err := run(t, nil, helm(t), "lint", "--strict", "--namespace", "kube-system", chartDir(),
		"--set", "hubble.relay.enabled=true", "--set", "hubble.ui.enabled=true"); err != nil {
		t.Errorf("helm lint --strict with the UI: %v\n%s", err, out)
	}
}

// The NOTES helm prints say that the UI is a second unauthenticated way to every flow
// (TLS on the relay does not change that) and how to keep it closed; without the UI
// they say nothing of it.
func TestChartNotesWarnAboutUI(t *testing.T) {
	for _, sets := range [][]string{
		{"hubble.relay.enabled=true", "hubble.ui.enabled=true"},
		{"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true", "hubble.tls.secretName=s"},
	} {
		n := notes(t, sets...)
		for _, want := range []string{"hubble-ui.kube-system:80", "WITHOUT authentication", "port-forward svc/hubble-ui", "NetworkPolicy"} {
			if !strings.Contains(n, want) {
				t.Errorf("NOTES with %v do not say %q:\n%s", sets, want, n)
			}
		}
	}
	if n := notes(t, "hubble.relay.enabled=true"); strings.Contains(n, "hubble-ui") {
		t.Errorf("NOTES without the UI mention it:\n%s", n)
	}
}
