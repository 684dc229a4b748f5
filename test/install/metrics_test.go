package install

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/myelin-net/myelin/internal/config"
)

// metricsConfig renders myelin-config with sets, checks the agent accepts it and
// returns its metric keys.
func metricsConfig(t *testing.T, sets ...string) map[string]string {
	t.Helper()
	cm := find(t, objects(t, template(t, sets...)), "ConfigMap", config.ConfigMapName)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	c, err := config.Resolve(config.Source{Name: "chart", Values: data})
	if err != nil {
		t.Fatalf("--set %v renders a configuration the agent refuses: %v", sets, err)
	}
	return map[string]string{"prometheus-serve-addr": c.PrometheusServeAddr, "hubble-metrics-server": c.HubbleMetricsServer,
		"hubble-metrics": strings.Join(c.HubbleMetrics, ",")}
}

// The metric values: on by default with the container ports named and no scrape
// annotations or ServiceMonitor; ports, families, annotations and ServiceMonitor
// follow the values; off renders "" (the agent's off) and no ports.
func TestChartMetrics(t *testing.T) {
	want := map[string]string{"prometheus-serve-addr": ":9962", "hubble-metrics-server": ":9965",
		"hubble-metrics": "dns,drop,tcp,flow,icmp,port-distribution"}
	if got := metricsConfig(t); !mapsEqual(got, want) {
		t.Errorf("default metric keys %v, want %v", got, want)
	}
	ds := daemonSet(t)
	agent := ds.Spec.Template.Spec.Containers[0]
	if got := portList(agent); !strings.HasPrefix(got, "prometheus=9962,hubble-metrics=9965,") {
		t.Errorf("default container ports %s, want prometheus=9962,hubble-metrics=9965 first", got)
	}
	if _, ok := ds.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
		t.Error("prometheus.io annotations rendered by default; they are opt-in")
	}
	for _, o := range objects(t, template(t)) {
		if o.GetKind() == "ServiceMonitor" {
			t.Error("a ServiceMonitor rendered by default; it is opt-in (needs the operator's CRDs)")
		}
	}

	sets := []string{"prometheus.port=9100", "hubble.metrics.port=9101", "hubble.metrics.enabled={drop,flow}",
		"prometheus.annotations=true", "prometheus.serviceMonitor.enabled=true"}
	want = map[string]string{"prometheus-serve-addr": ":9100", "hubble-metrics-server": ":9101", "hubble-metrics": "drop,flow"}
	if got := metricsConfig(t, sets...); !mapsEqual(got, want) {
		t.Errorf("--set %v: metric keys %v, want %v", sets, got, want)
	}
	ds = daemonSet(t, sets...)
	if a := ds.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9100" {
		t.Errorf("annotations %v, want prometheus.io/scrape true and port 9100", a)
	}
	objs := objects(t, template(t, sets...))
	sm := find(t, objs, "ServiceMonitor", "myelin-agent")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	svc := find(t, objs, "Service", "myelin-agent-metrics")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(eps) != 2 || len(ports) != 2 {
		t.Errorf("ServiceMonitor endpoints %v, Service ports %v: want prometheus and hubble-metrics", eps, ports)
	}
	smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range smSel {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, the Service's labels are %v", k, v, svc.GetLabels())
		}
	}

	off := []string{"prometheus.enabled=false", "hubble.metrics.enabled=null"}
	if got := metricsConfig(t, off...); got["prometheus-serve-addr"] != "" || got["hubble-metrics-server"] != "" {
		t.Errorf("--set %v: metric keys %v, want both endpoints off", off, got)
	}
	if got := portList(daemonSet(t, off...).Spec.Template.Spec.Containers[0]); strings.Contains(got, "metrics") || strings.Contains(got, "prometheus") {
		t.Errorf("--set %v: container ports %s, want no metric port", off, got)
	}
}

// The schema refuses what the agent cannot serve, naming the value.
func TestHelmSchemaRefusesBadMetricValues(t *testing.T) {
	for set, msg := range map[string]string{
		"hubble.metrics.enabled={dns,http}": "at '/hubble/metrics/enabled/1': value must be one of",
		"prometheus.port=70000":             "at '/prometheus/port'",
		"prometheus.serviceMonitor.x=1":     "additional properties 'x' not allowed",
	} {
		out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system", "--set", set)
		if err == nil || !strings.Contains(out, msg) {
			t.Errorf("helm template --set %s: err %v, output %q; want a failure saying %q", set, err, out, msg)
		}
	}
}

func portList(c corev1.Container) string {
	var out []string
	for _, p := range c.Ports {
		port := p.Name + "=" + strconv.Itoa(int(p.ContainerPort))
		if p.Protocol != corev1.ProtocolTCP {
			port += "/" + string(p.Protocol)
		}
		out = append(out, port)
	}
	return strings.Join(out, ",")
}

// The agent declares every port it serves on the node (hostNetwork: each is a
// hostPort), so the scheduler and the kubelet refuse a pod whose hostPort would
// take one of them through portmap's DNAT: the relay's connections (Hubble), the
// other nodes' health probes, the load balancers' kube-proxy probes, the scrapes,
// the tunnel. Each follows the value that turns it on and sets its port.
func TestChartDeclaresAgentPorts(t *testing.T) {
	for _, c := range []struct {
		sets []string
		want string
	}{
		{nil, "prometheus=9962,hubble-metrics=9965,cluster-health=4240,health=9879,kubeproxy-hz=10256,kubeproxy-mx=10249,tunnel=8472/UDP"},
		{[]string{"routingMode=native", "hubble.relay.enabled=true", "clusterHealthPort=4300", "healthPort=9000",
			"kubeProxyReplacementHealthzBindAddr=[::]:10300", "kubeProxyReplacementMetricsBindAddr=",
			"prometheus.enabled=false", "hubble.metrics.enabled=null"},
			"hubble-peer=4244,cluster-health=4300,health=9000,kubeproxy-hz=10300"},
		{[]string{"hubble.listenAddress=10.0.0.1:4999", "clusterHealthPort=0", "kubeProxyReplacement=false", "tunnelPort=9999"},
			"prometheus=9962,hubble-metrics=9965,hubble-peer=4999,health=9879,tunnel=9999/UDP"},
	} {
		if got := portList(daemonSet(t, c.sets...).Spec.Template.Spec.Containers[0]); got != c.want {
			t.Errorf("--set %v: agent ports %s, want %s", c.sets, got, c.want)
		}
	}
}

// TestChartRefusesAgentPortCollisions: two values giving the agent one port (same
// protocol) fail the render naming both; a UDP and a TCP port of one number do not.
func TestChartRefusesAgentPortCollisions(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"healthPort=9962", "prometheus.port and healthPort both give port 9962/TCP"},
		{"hubble.listenAddress=:9879", "hubble.listenAddress and healthPort both give port 9879/TCP"},
		{"kubeProxyReplacementHealthzBindAddr=0.0.0.0:4240", "clusterHealthPort and kubeProxyReplacementHealthzBindAddr both give port 4240/TCP"},
	} {
		out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system", "--set", c.set)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("--set %s: err %v, output %q; want a failure saying %q", c.set, err, out, c.want)
		}
	}
	if got := portList(daemonSet(t, "tunnelPort=9962").Spec.Template.Spec.Containers[0]); !strings.Contains(got, "tunnel=9962/UDP") {
		t.Errorf("tunnelPort=9962 (UDP beside prometheus' TCP 9962): agent ports %s, want it rendered", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
