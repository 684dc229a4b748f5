package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/promtool"
	"github.com/myelin-net/myelin/internal/testenv"
)

// TestLabMyelinMetrics makes known traffic on a 2-node lab (pod-to-pod TCP, a
// ClusterIP Service, a DNS query to a resolver pod, connections a NetworkPolicy
// drops), then scrapes each node's agent from inside the node's netns, on :9962 and
// :9965 as Prometheus would: Prometheus' own promtool check metrics passes on every
// scrape, and the values say what happened (endpoints = the node's pods, the drop
// counter of DROP_POLICY_DENIED, forwarded bytes growing with traffic, the Hubble
// families of the flows).
func TestLabMyelinMetrics(t *testing.T) {
	requireRoot(t)
	bin := promtoolBin(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createPod(t, cs, "m-client", n1, map[string]string{"app": "m-client"}, "sleep", "infinity")
	createPod(t, cs, "m-server", n2, map[string]string{"app": "m-server"}, myelinBin, "lab", "serve", "--listen", ":8080")
	createPod(t, cs, "m-dns", n2, map[string]string{"app": "m-dns"}, myelinBin, "lab", "dnstool", "serve", "--answer", "198.51.100.7")
	server := runningPods(t, cs, "app=m-server", 1)[0]
	dns := runningPods(t, cs, "app=m-dns", 1)[0]
	runningPods(t, cs, "app=m-client", 1)
	svc := createService(t, cs, "m-web", "m-server", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	client := func(argv ...string) (string, error) { return inPod("m-client", argv...) }

	before := sumOf(scrape(t, bin, n1, 9962), "myelin_forward_bytes_total", nil)
	for range 5 {
		checkTCP(t, "m-client", client, server.Status.PodIP, "m-server")
	}
	if out, err := client("curl", "-sS", "-m", "5", "http://"+svc.Spec.ClusterIP+"/"); err != nil {
		t.Errorf("curl the ClusterIP: %v %s", err, out)
	}
	if out, err := client(myelinBin, "lab", "dnstool", "query", "--server", dns.Status.PodIP+":53", "web.metrics.test"); err != nil || strings.TrimSpace(out) != "198.51.100.7" {
		t.Errorf("DNS query to the resolver pod: %v %q", err, out)
	}
	after := sumOf(scrape(t, bin, n1, 9962), "myelin_forward_bytes_total", nil)
	t.Logf("%s myelin_forward_bytes_total: %v before the traffic, %v after", n1, before, after)
	if after <= before {
		t.Errorf("myelin_forward_bytes_total on %s: %v before 6 HTTP exchanges, %v after; want it to grow", n1, before, after)
	}
	denyIngress(t, cs, "m-server")
	eventually(t, time.Minute, "the policy drops connections to m-server", func(context.Context) (bool, string) {
		out, err := client("curl", "-sS", "-m", "1", fmt.Sprintf("http://%s:8080/", server.Status.PodIP))
		return err != nil, out
	})

	checkAgentMetrics(t, cs, bin, n1, n2)
	checkFlowMetrics(t, bin, n1, n2)
	checkConnectionFlood(t, cs, bin, n1, runningPods(t, cs, "app=m-client", 1)[0])
}

// checkConnectionFlood has a pod open 400 connections to its node's metrics port
// and hold them, idle, as an attacker would to exhaust the agent's descriptors: the
// agent keeps at most connlimit.Clients.PerSource() of them (its open descriptors
// grow by no more, give or take the agent's own), closes the rest at once and
// counts them, says so in its log, and a scrape from the node keeps working.
func checkConnectionFlood(t *testing.T, cs kubernetes.Interface, bin, node string, client corev1.Pod) {
	t.Helper()
	const flood = 400
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(k8s.NodeInternalIP(n).String(), "9962")
	before := scrape(t, bin, node, 9962)
	if _, ok := before["myelin_server_connections_refused_total"]; !ok {
		t.Fatalf("%s serves no myelin_server_connections_refused_total", node)
	}
	fds0, refused0 := sumOf(before, "process_open_fds", nil), sumOf(before, "myelin_server_connections_refused_total", nil)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	if err := netns.Do(podNetNS(client), func() error {
		for range flood {
			c, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	}); err != nil {
		t.Fatalf("connect %d times from %s to %s: %v", flood, client.Name, target, err)
	}
	var m map[string]*dto.MetricFamily
	perSource := float64(connlimit.Clients.PerSource())
	eventually(t, 30*time.Second, fmt.Sprintf("%s refusing the flood beyond %v connections", node, perSource), func(context.Context) (bool, string) {
		m = scrape(t, bin, node, 9962)
		refused := sumOf(m, "myelin_server_connections_refused_total", nil) - refused0
		return refused >= flood-perSource, fmt.Sprintf("%v refused", refused)
	})
	if grown := sumOf(m, "process_open_fds", nil) - fds0; grown > perSource+16 {
		t.Errorf("the agent's open descriptors grew by %v under a flood of %d connections from one pod, want at most %v (+16)", grown, flood, perSource)
	}
	if log := agentLog(t, node); !strings.Contains(log, "refusing connections over the servers' bound") || !strings.Contains(log, client.Status.PodIP) {
		t.Errorf("%s's log does not name the refused source %s", node, client.Status.PodIP)
	}
	t.Logf("%s under a flood of %d connections from %s: %v refused, open descriptors %v -> %v",
		node, flood, client.Name, sumOf(m, "myelin_server_connections_refused_total", nil)-refused0, fds0, sumOf(m, "process_open_fds", nil))
}

// checkAgentMetrics: each node's endpoints gauge is its pods, node 2 (the server's,
// where the policy applies) counted DROP_POLICY_DENIED drops, the modes, Services,
// map fill, GC and Service sync latency are there.
func checkAgentMetrics(t *testing.T, cs kubernetes.Interface, bin, n1, n2 string) {
	t.Helper()
	for _, node := range []string{n1, n2} {
		want := podsOnNode(t, cs, node)
		eventually(t, 30*time.Second, node+": myelin_endpoints = its pods", func(context.Context) (bool, string) {
			got := sumOf(scrape(t, bin, node, 9962), "myelin_endpoints", nil)
			if got == float64(want) {
				t.Logf("%s: myelin_endpoints %v = its %d pods", node, got, want)
			}
			return got == float64(want), fmt.Sprintf("myelin_endpoints %v, pods on the node %d", got, want)
		})
	}
	eventually(t, 30*time.Second, n2+": the agent's counters and state", func(context.Context) (bool, string) {
		m := scrape(t, bin, n2, 9962)
		var bad []string
		for _, c := range []struct {
			name   string
			labels map[string]string
			min    float64
		}{
			{"myelin_drop_count_total", map[string]string{"reason": "DROP_POLICY_DENIED"}, 1},
			{"myelin_drop_bytes_total", map[string]string{"reason": "DROP_POLICY_DENIED"}, 40},
			{"myelin_host_routing_mode", map[string]string{"mode": "bpf"}, 1},
			{"myelin_routing_mode", map[string]string{"mode": "native"}, 1},
			{"myelin_datapath_loaded", nil, 1},
			{"myelin_services", nil, 2}, // kubernetes and m-web
			{"myelin_service_backends", nil, 1},
			{"myelin_bpf_map_pressure", map[string]string{"map": "myelin_endpoints"}, 1e-9},
			{"myelin_bpf_map_entries", map[string]string{"map": "myelin_policy"}, 0},
			{"myelin_datapath_gc_runs_total", map[string]string{"table": "nat"}, 1},
			{"myelin_datapath_gc_runs_total", map[string]string{"table": "policy-ct"}, 1},
			{"myelin_controller_runs_total", map[string]string{"controller": "services"}, 1},
			{"myelin_api_sync_latency_seconds", map[string]string{"resource": "services"}, 1}, // the histogram's count
		} {
			if got := sumOf(m, c.name, c.labels); got < c.min {
				bad = append(bad, fmt.Sprintf("%s%v = %v, want >= %v", c.name, c.labels, got, c.min))
			}
		}
		if len(bad) == 0 {
			t.Logf("%s: DROP_POLICY_DENIED drops %v, Services %v, Service sync latency observations %v", n2,
				sumOf(m, "myelin_drop_count_total", map[string]string{"reason": "DROP_POLICY_DENIED"}),
				sumOf(m, "myelin_services", nil), sumOf(m, "myelin_api_sync_latency_seconds", nil))
		}
		if _, ok := m["myelin_conntrack_entries"]; !ok {
			bad = append(bad, "no myelin_conntrack_entries")
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

// checkFlowMetrics: the Hubble families count the flows of the traffic above, summed
// over both nodes (a flow is counted by the node that saw it).
func checkFlowMetrics(t *testing.T, bin, n1, n2 string) {
	t.Helper()
	eventually(t, 30*time.Second, "the flow metrics of the traffic", func(context.Context) (bool, string) {
		m1, m2 := scrape(t, bin, n1, 9965), scrape(t, bin, n2, 9965)
		var bad []string
		for _, c := range []struct {
			name   string
			labels map[string]string
		}{
			{"hubble_flows_processed_total", map[string]string{"verdict": "FORWARDED"}},
			{"hubble_flows_processed_total", map[string]string{"type": "Drop", "verdict": "DROPPED"}},
			{"hubble_drop_total", map[string]string{"reason": "POLICY_DENIED", "protocol": "TCP"}},
			{"hubble_tcp_flags_total", map[string]string{"flag": "SYN"}},
			{"hubble_port_distribution_total", map[string]string{"protocol": "TCP", "port": "8080"}},
			{"hubble_dns_queries_total", map[string]string{"qtypes": "A"}},
			{"hubble_dns_responses_total", map[string]string{"rcode": "NOERROR", "ips_returned": "1"}},
		} {
			if got := sumOf(m1, c.name, c.labels) + sumOf(m2, c.name, c.labels); got < 1 {
				bad = append(bad, fmt.Sprintf("%s%v = %v on both nodes, want >= 1", c.name, c.labels, got))
			}
		}
		if len(bad) == 0 {
			t.Logf("hubble_drop_total{reason=POLICY_DENIED}: %v, hubble_flows_processed_total: %v",
				sumOf(m1, "hubble_drop_total", nil)+sumOf(m2, "hubble_drop_total", nil),
				sumOf(m1, "hubble_flows_processed_total", nil)+sumOf(m2, "hubble_flows_processed_total", nil))
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

// promtoolBin is promtool's path for scrape; the test is skipped without it
// (make setup builds it).
func promtoolBin(t *testing.T) string {
	t.Helper()
	bin := promtool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs promtool %s (make setup builds it into %s)", promtool.Version, promtool.BinDir())
	}
	return bin
}

// scrape fetches a node agent's metrics on port from inside the node's netns (the
// agent listens there), checks the scrape with promtool check metrics and parses it.
func scrape(t *testing.T, bin, node string, port int) map[string]*dto.MetricFamily {
	t.Helper()
	out, err := inNode(node, "curl", "-sS", "-m", "5", fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatalf("scrape %s :%d: %v\n%s", node, port, err, lastLines(out, 5))
	}
	if err := promtool.CheckMetrics(bin, []byte(out)); err != nil {
		t.Errorf("scrape of %s :%d: %v", node, port, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatalf("parse the scrape of %s :%d: %v", node, port, err)
	}
	return m
}

// sumOf sums the series of family name whose labels include want (a histogram's
// sample count).
func sumOf(m map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	mf, ok := m[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, s := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Histogram != nil:
			total += float64(s.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// podsOnNode counts the pods bound to node that have their own network.
func podsOnNode(t *testing.T, cs kubernetes.Interface, node string) int {
	t.Helper()
	pods, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if !p.Spec.HostNetwork && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}
