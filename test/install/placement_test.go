package install

import (
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// hubble.relay.{nodeSelector,tolerations,affinity} and hubble.ui's place the relay and
// the UI: their pods hold TLS keys that read every node's flows, so docs/hubble.md
// ("Exposure") tells users to keep them on trusted nodes, e.g. the control plane. The
// values reach the Deployments' pod specs (a nodeSelector merged with the default
// kubernetes.io/os: linux, null dropping it); the defaults keep kubernetes.io/os: linux
// and nothing else; a wrong type is refused.
func TestChartHubbleRelayAndUIPlacement(t *testing.T) {
	const cp = "node-role.kubernetes.io/control-plane"
	placement := []string{
		"--set", "hubble.relay.enabled=true", "--set", "hubble.ui.enabled=true",
		"--set-json", `hubble.relay.nodeSelector={"` + cp + `":""}`,
		"--set-json", `hubble.relay.tolerations=[{"key":"` + cp + `","operator":"Exists","effect":"NoSchedule"}]`,
		"--set-json", `hubble.relay.affinity={"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"hubble-ui"}}}}]}}`,
		"--set-json", `hubble.ui.nodeSelector={"` + cp + `":""}`,
		"--set-json", `hubble.ui.tolerations=[{"key":"` + cp + `","operator":"Exists","effect":"NoSchedule"}]`,
	}
	out, failed := helmTemplate(t, placement...)
	if failed {
		t.Fatalf("helm template %v: failed\n%s", placement, out)
	}
	objs := objects(t, out)
	wantTol := []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	for _, name := range []string{"hubble-relay", "hubble-ui"} {
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", name).Object, &dep); err != nil {
			t.Fatal(err)
		}
		spec := dep.Spec.Template.Spec
		if want := map[string]string{cp: "", "kubernetes.io/os": "linux"}; !reflect.DeepEqual(spec.NodeSelector, want) {
			t.Errorf("%s nodeSelector %v, want %v (helm merges the value with the default)", name, spec.NodeSelector, want)
		}
		if !reflect.DeepEqual(spec.Tolerations, wantTol) {
			t.Errorf("%s tolerations %+v, want %+v", name, spec.Tolerations, wantTol)
		}
		anti := name == "hubble-relay"
		if got := spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil &&
			len(spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1; got != anti {
			t.Errorf("%s affinity %+v: want the podAntiAffinity only on the relay (%v)", name, spec.Affinity, anti)
		}
	}
	out, failed = helmTemplate(t, "--set", "hubble.relay.enabled=true", "--set", "hubble.relay.nodeSelector=null")
	if failed {
		t.Fatalf("helm template hubble.relay.nodeSelector=null: failed %v\n%s", failed, out)
	}
	relay := find(t, objects(t, out), "Deployment", "hubble-relay")
	if _, ok, _ := unstructured.NestedMap(relay.Object, "spec", "template", "spec", "nodeSelector"); ok {
		t.Errorf("hubble.relay.nodeSelector=null: the relay still has a nodeSelector; want none (any node)")
	}
	if out, err := run(t, nil, helm(t), append([]string{"lint", "--strict", "--namespace", "kube-system", chartDir()}, placement...)...); err != nil {
		t.Errorf("helm lint --strict with the placement values: %v\n%s", err, out)
	}

	for _, o := range objects(t, template(t, "hubble.relay.enabled=true", "hubble.ui.enabled=true")) {
		if o.GetKind() != "Deployment" {
			continue
		}
		var dep appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
			t.Fatal(err)
		}
		spec := dep.Spec.Template.Spec
		if want := map[string]string{"kubernetes.io/os": "linux"}; !reflect.DeepEqual(spec.NodeSelector, want) ||
			spec.Tolerations != nil || spec.Affinity != nil {
			t.Errorf("default %s: nodeSelector %v, tolerations %v, affinity %v; want %v and no tolerations or affinity",
				dep.Name, spec.NodeSelector, spec.Tolerations, spec.Affinity, want)
		}
	}

	for _, c := range []struct{ set, path string }{
		{"hubble.relay.tolerations=" + cp, "/hubble/relay/tolerations"},
		{"hubble.ui.tolerations=" + cp, "/hubble/ui/tolerations"},
		{"hubble.relay.nodeSelector=linux", "/hubble/relay/nodeSelector"},
		{"hubble.ui.affinity=any", "/hubble/ui/affinity"},
	} {
		out, failed := helmTemplate(t, "--set", "hubble.relay.enabled=true", "--set", "hubble.ui.enabled=true", "--set-string", c.set)
		if !failed || !strings.Contains(out, "at '"+c.path+"'") {
			t.Errorf("helm template --set-string %s: failed %v, output %.300q; want a schema error at '%s'", c.set, failed, out, c.path)
		}
	}
	out, failed = helmTemplate(t, "--set", "hubble.relay.enabled=true", "--set-json", `hubble.relay.tolerations=[{"key":"a","operator":"Sometimes"}]`)
	if !failed || !strings.Contains(out, "at '/hubble/relay/tolerations/0/operator'") {
		t.Errorf("a toleration with operator Sometimes: failed %v, output %.300q; want a schema error at '/hubble/relay/tolerations/0/operator'", failed, out)
	}
}
