package install

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/myelin-net/myelin/internal/config"
)

// hubble.relay.enabled renders the relay: `myelin relay` from the agent image on 4245,
// connecting to the agents' hubble.listenAddress port, which the ConfigMap passes to
// the agents as hubble-listen-address; off (the default) renders nothing of it.
// (TestChartHubbleListenAddress: the port with hubble.listenAddress left empty.)
func TestChartHubbleRelay(t *testing.T) {
	objs := objects(t, template(t, "hubble.relay.enabled=true", "hubble.listenAddress=:4300"))
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", "hubble-relay").Object, &dep); err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if strings.Join(c.Command, " ") != "/usr/bin/myelin" || len(c.Args) == 0 || c.Args[0] != "relay" ||
		arg(c, "--listen") != ":4245" || arg(c, "--peer-port") != "4300" {
		t.Errorf("relay container %v %v: want /usr/bin/myelin relay --listen=:4245 --peer-port=4300", c.Command, c.Args)
	}
	checkRelayRBAC(t, objs, dep.Spec.Template.Spec.ServiceAccountName)
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Service", "hubble-relay").Object, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 4245 || svc.Spec.Selector["app.kubernetes.io/name"] != "hubble-relay" {
		t.Errorf("relay Service %+v: want port 4245 selecting the relay", svc.Spec)
	}
	cm := find(t, objs, "ConfigMap", config.ConfigMapName)
	if v, _, _ := unstructured.NestedString(cm.Object, "data", "hubble-listen-address"); v != ":4300" {
		t.Errorf("ConfigMap hubble-listen-address %q, want :4300", v)
	}
	for _, o := range objects(t, template(t)) {
		if o.GetName() == "hubble-relay" {
			t.Errorf("the default values render %s hubble-relay: the relay is off unless hubble.relay.enabled", o.GetKind())
		}
	}
	out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system",
		"--set", "hubble.relay.enabled=true", "--set", "hubble.listenAddress=127.0.0.1:4244")
	if err == nil || !strings.Contains(out, "loopback-only") {
		t.Errorf("relay with a loopback listenAddress: err %v, output %q; want a failure naming it loopback-only", err, out)
	}
	if out, err := run(t, nil, helm(t), "lint", "--strict", "--namespace", "kube-system", chartDir(), "--set", "hubble.relay.enabled=true"); err != nil {
		t.Errorf("helm lint --strict with the relay: %v\n%s", err, out)
	}
}

// checkRelayRBAC: the relay runs as its own ServiceAccount, bound (only) to a
// ClusterRole that reads Nodes, never as the agent's.
func checkRelayRBAC(t *testing.T, objs []*unstructured.Unstructured, sa string) {
	t.Helper()
	if sa != "hubble-relay" {
		t.Errorf("relay ServiceAccount %q: want hubble-relay (its own, not the agent's myelin)", sa)
	}
	find(t, objs, "ServiceAccount", "hubble-relay")
	var cr rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "ClusterRole", "myelin-hubble-relay").Object, &cr); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}
	if !slices.EqualFunc(cr.Rules, want, rulesEqual) {
		t.Errorf("relay ClusterRole rules %+v, want only %+v", cr.Rules, want)
	}
	var crb rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "ClusterRoleBinding", "myelin-hubble-relay").Object, &crb); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != "myelin-hubble-relay" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "hubble-relay" ||
		crb.Subjects[0].Namespace != "kube-system" {
		t.Errorf("relay ClusterRoleBinding %+v %+v: want myelin-hubble-relay bound to kube-system/hubble-relay only", crb.RoleRef, crb.Subjects)
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		var b rbacv1.ClusterRoleBinding // RoleBinding has the same subjects
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatal(err)
		}
		for _, s := range b.Subjects {
			if s.Name == "hubble-relay" && b.RoleRef.Name != "myelin-hubble-relay" {
				t.Errorf("%s %s binds the relay to %s: it must get only myelin-hubble-relay", o.GetKind(), o.GetName(), b.RoleRef.Name)
			}
		}
	}
}
