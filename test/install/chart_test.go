package install

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/helmtool"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
)

// labSets are the values a lab install passes (docs/install.md, "In the lab").
var labSets = []string{"perNodePaths=true", "bpf.mountPropagation=None", "cni.binPath=/run/myelin-lab/cni/bin", "cni.confPath=/run/myelin-lab/cni/net.d",
	"k8sServiceHost=198.18.0.1", "k8sServicePort=6443", "image.tag=v0.0.0-test", "socketLB.netnsPath=/run/myelin-lab/nodes"}

func TestHelmVersionPinned(t *testing.T) {
	if got := versionsPin(t, "HELM_VERSION"); got != helmtool.Version {
		t.Errorf("scripts/versions.sh pins helm %s, internal/helmtool %s: keep them equal", got, helmtool.Version)
	}
}

func TestHelmLintStrict(t *testing.T) {
	for _, sets := range [][]string{nil, labSets} {
		args := []string{"lint", "--strict", "--namespace", "kube-system", chartDir()}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := run(t, nil, helm(t), args...); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// A typo'd key, a wrong type and a value outside its enum fail at helm install (and
// template) with the schema's message naming the value; so does another namespace.
func TestHelmSchemaRejectsBadValues(t *testing.T) {
	cases := []struct {
		set, ns, want string
	}{
		{"routingmode=native", "kube-system", "additional properties 'routingmode' not allowed"},
		{"bpf.masqurade=false", "kube-system", "additional properties 'masqurade' not allowed"},
		{"tunnelPort=vxlan", "kube-system", "at '/tunnelPort': got string, want integer"},
		{"kubeProxyReplacement=maybe", "kube-system", "at '/kubeProxyReplacement': got string, want boolean"},
		{"routingMode=geneve", "kube-system", "at '/routingMode'"},
		{"ipv4NativeRoutingCIDR=10.0.0.0", "kube-system", "at '/ipv4NativeRoutingCIDR'"},
		{"image.tag=x", "other", `myelin must be installed in namespace kube-system (got "other")`},
	}
	for _, c := range cases {
		out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", c.ns, "--set", c.set)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template --set %s -n %s: err %v, output %q; want a failure saying %q", c.set, c.ns, err, out, c.want)
		}
	}
}

// The chart ships the same CRDs the lab installs (deploy/crds, embedded by internal/k8s).
func TestChartCRDsAreDeployCRDs(t *testing.T) {
	want, _ := filepath.Glob(filepath.Join(repoRoot(), "deploy", "crds", "*.yaml"))
	got, _ := filepath.Glob(filepath.Join(chartDir(), "crds", "*.yaml"))
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("chart crds %v, deploy crds %v: ship every CRD in both", got, want)
	}
	for _, w := range want {
		a, _ := os.ReadFile(w)
		b, err := os.ReadFile(filepath.Join(chartDir(), "crds", filepath.Base(w)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("install/helm/myelin/crds/%s differs from deploy/crds (%v): copy deploy/crds/%[1]s over it", filepath.Base(w), err)
		}
	}
}

// The chart's roles grant exactly the lab's rules (internal/lab/cni/myelin/rbac.go).
func TestChartRBACIsLabRBAC(t *testing.T) {
	objs := objects(t, template(t))
	wantCluster, wantNS := myelin.AgentRules()
	var cr rbacv1.ClusterRole
	var role rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "ClusterRole", "myelin-agent").Object, &cr); err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Role", "myelin-agent").Object, &role); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(cr.Rules, wantCluster, rulesEqual) {
		t.Errorf("chart ClusterRole rules %+v\nlab rules %+v", cr.Rules, wantCluster)
	}
	if !slices.EqualFunc(role.Rules, wantNS, rulesEqual) || role.Namespace != config.ConfigMapNamespace {
		t.Errorf("chart Role %s rules %+v\nlab rules %+v", role.Namespace, role.Rules, wantNS)
	}
}

func rulesEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames)
}

// The rendered myelin-config is a configuration the agent accepts, with the defaults
// and with every value changed, and names each key the values set.
func TestChartConfigMapIsValidConfig(t *testing.T) {
	for _, c := range []struct {
		sets []string
		want map[string]string
	}{
		{nil, map[string]string{"routing-mode": "tunnel", "kube-proxy-replacement": "true", "tunnel-port": "8472"}},
		{[]string{"routingMode=native", "autoDirectNodeRoutes=true", "ipv4NativeRoutingCIDR=10.244.0.0/16", "clusterCIDR=10.244.0.0/16",
			"hostRouting=legacy", "bpf.masquerade=false", "bpf.tunnel=false", "nonMasqueradeCIDRs={10.1.0.0/16,10.2.0.0/16}", "userIptablesGuard=warn",
			"kubeProxyReplacement=false", "loadBalancer.algorithm=maglev", "maglev.tableSize=1021", "MTU=1400", "natPortRange=62000-65000",
			"nodePort.natSynMax=1000000", "nodePort.natMax=2000000", "nodePort.natUDPMax=3000000", "enableSourceIPVerification=false", "tunnelPort=9000", "enableIPv4BIGTCP=true",
			"podSourceFromHosts=drop", "tunnelPodToNode=encapsulate"},
			map[string]string{"routing-mode": "native", "auto-direct-node-routes": "true", "ipv4-native-routing-cidr": "10.244.0.0/16",
				"cluster-cidr": "10.244.0.0/16", "host-routing": "legacy", "enable-bpf-masquerade": "false", "enable-bpf-tunnel": "false",
				"non-masquerade-cidrs": "10.1.0.0/16,10.2.0.0/16", "user-iptables-guard": "warn", "kube-proxy-replacement": "false",
				"lb-algorithm": "maglev", "maglev-table-size": "1021", "mtu": "1400", "nat-port-range": "62000-65000",
				"nodeport-nat-syn-max": "1000000", "nodeport-nat-max": "2000000", "nodeport-nat-udp-max": "3000000", "enable-source-ip-verification": "false", "tunnel-port": "9000", "enable-ipv4-big-tcp": "true",
				"pod-source-from-hosts": "drop", "tunnel-pod-to-node": "encapsulate"}},
	} {
		cm := find(t, objects(t, template(t, c.sets...)), "ConfigMap", config.ConfigMapName)
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if cm.GetNamespace() != config.ConfigMapNamespace {
			t.Errorf("ConfigMap in %s, the agent reads %s", cm.GetNamespace(), config.ConfigMapNamespace)
		}
		if _, err := config.Resolve(config.Source{Name: "chart", Values: data}); err != nil {
			t.Errorf("--set %v renders a configuration the agent refuses: %v", c.sets, err)
		}
		for k, v := range c.want {
			if data[k] != v {
				t.Errorf("--set %v: %s = %q, want %q", c.sets, k, data[k], v)
			}
		}
	}
}
