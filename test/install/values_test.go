package install

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/myelin-net/myelin/internal/config"
)

// Values the agent would refuse, or that leave it unable to reach the apiserver, fail
// at helm install and template: tunnelProtocol geneve (the agent has VXLAN only), and
// k8sServiceHost without k8sServicePort.
func TestHelmSchemaRefusesWhatTheAgentCannotRun(t *testing.T) {
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"tunnelProtocol=geneve"}, "at '/tunnelProtocol'"},
		{[]string{"k8sServiceHost=198.18.0.1"}, "at '/k8sServicePort'"},
		{[]string{"k8sServiceHost=198.18.0.1", "k8sServicePort="}, "at '/k8sServicePort'"},
	} {
		args := []string{"template", "myelin", chartDir(), "--namespace", "kube-system"}
		for _, s := range c.sets {
			args = append(args, "--set", s)
		}
		if out, err := run(t, nil, helm(t), args...); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template --set %v: err %v, output %q; want a failure saying %q", c.sets, err, out, c.want)
		}
	}
	template(t, "k8sServiceHost=198.18.0.1", "k8sServicePort=6443") // both set: accepted
}

// extraConfig may not set a key that a typed value renders: the chart fails naming
// the key and the value to use. Every key of the ConfigMap rendered with every
// optional value set is checked, so a key added to the ConfigMap without its entry in
// myelin.typedKeys fails here.
func TestChartExtraConfigRefusesTypedKeys(t *testing.T) {
	cm := find(t, objects(t, template(t, "clusterCIDR=10.244.0.0/16", "ipv4NativeRoutingCIDR=10.244.0.0/16",
		"nonMasqueradeCIDRs={10.1.0.0/16}")), "ConfigMap", config.ConfigMapName)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) < 19 {
		t.Fatalf("rendered ConfigMap has %d keys, want every typed key: %v", len(data), data)
	}
	for key := range data {
		out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system",
			"--set-string", "extraConfig."+key+"=x")
		if err == nil || !strings.Contains(out, "extraConfig."+key+": the chart renders key") || !strings.Contains(out, "set ") {
			t.Errorf("helm template --set-string extraConfig.%s=x: err %v, output %q; want a failure naming the key and its value", key, err, out)
		}
	}
	out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system", "--set-string", "extraConfig.mtu=1400")
	if err == nil || !strings.Contains(out, "from the value MTU; set MTU instead") {
		t.Errorf("extraConfig.mtu: err %v, output %q; want it to name the value MTU", err, out)
	}
}
