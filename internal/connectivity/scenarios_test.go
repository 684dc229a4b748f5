package connectivity

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testEnv(nodes int, dnsIP string) *env {
	e := &env{ns: "myelin-connectivity-x", hostPort: 45000, dnsIP: dnsIP, pods: map[string]pod{}, services: map[string]*corev1.Service{}}
	for i := 0; i < nodes; i++ {
		e.nodes = append(e.nodes, node{name: "node-" + string(rune('1'+i)), ip: "198.18.0.1" + string(rune('1'+i))})
	}
	a, b := e.nodes[0].name, e.nodes[len(e.nodes)-1].name
	e.pods[podClient] = pod{podClient, a, "10.244.0.2"}
	e.pods[podServerA] = pod{podServerA, a, "10.244.0.3"}
	e.pods[podServerB] = pod{podServerB, b, "10.244.2.2"}
	e.pods[podHost] = pod{podHost, b, e.nodes[len(e.nodes)-1].ip}
	for name, port := range map[string]int32{svcEcho: 30001, svcLocal: 30002} {
		e.services[name] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.50", Ports: []corev1.ServicePort{{NodePort: port}}}}
	}
	return e
}

func byName(s []scenario) map[string]scenario {
	m := map[string]scenario{}
	for _, sc := range s {
		m[sc.name] = sc
	}
	return m
}

func TestScenariosThreeNodes(t *testing.T) {
	s := byName(testEnv(3, "10.96.0.10").scenarios(Options{External: DefaultExternal, ClusterDomain: "cluster.local"}))
	for _, name := range []string{"pod-to-pod/same-node", "pod-to-pod/cross-node", "pod-to-service/cluster-ip",
		"pod-to-service/node-port/node-1", "pod-to-service/node-port/node-2", "pod-to-service/node-port/node-3",
		"pod-to-service/local-traffic/node-1", "pod-to-service/local-traffic/node-3", "pod-to-host",
		"host-to-pod/same-node", "host-to-pod/cross-node", "pod-to-outside", "dns/service",
		"mtu/icmp-df", "fragments/icmp", "fragments/udp", "policy/allowed", "policy/denied"} {
		sc, ok := s[name]
		if !ok {
			t.Errorf("no scenario %s", name)
			continue
		}
		if sc.skip != "" {
			t.Errorf("%s skipped (%s) on three nodes with kube-dns", name, sc.skip)
		}
	}
	if d := s["dns/service"]; !strings.Contains(strings.Join(d.probe, " "), "echo.myelin-connectivity-x.svc.cluster.local") ||
		!strings.Contains(strings.Join(d.probe, " "), "--expect 10.96.0.50") {
		t.Errorf("dns probe %v: want the echo Service's name and its ClusterIP", d.probe)
	}
	if l := s["pod-to-service/local-traffic/node-3"]; !strings.Contains(strings.Join(l.probe, " "), "server=server-b") {
		t.Errorf("local-traffic via node-3 %v: must require node-3's own server", l.probe)
	}
	if l := s["pod-to-service/local-traffic/node-1"]; strings.Contains(strings.Join(l.probe, " "), "server=") {
		t.Errorf("local-traffic via the client's node-1 %v: its pods may get any server", l.probe)
	}
	if d := s["policy/denied"]; !d.deny || !d.policy || d.from != podServerA {
		t.Errorf("policy/denied = %+v: want a denial from server-a with the policy", d)
	}
}

func TestScenariosSkips(t *testing.T) {
	s := byName(testEnv(1, "").scenarios(Options{ClusterDomain: "cluster.local"}))
	for name, reason := range map[string]string{
		"pod-to-pod/cross-node": "one node", "host-to-pod/cross-node": "one node",
		"dns/service": "no kube-dns Service", "pod-to-outside": "no --external",
	} {
		if !strings.Contains(s[name].skip, reason) {
			t.Errorf("%s: skip %q, want %q", name, s[name].skip, reason)
		}
	}
}

func TestReport(t *testing.T) {
	results := []Result{
		{Scenario: "pod-to-pod/same-node", Status: Passed},
		{Scenario: "dns/service", Status: Skipped, Detail: "no kube-dns Service"},
		{Scenario: "pod-to-pod/cross-node", From: "client (n1, 10.244.0.2)", To: "server-b (n2) 10.244.1.2:8080",
			Expect: "HTTP 200", Status: Failed, Detail: "context deadline exceeded"},
	}
	var out strings.Builder
	printTable(&out, results)
	want := "FAIL pod-to-pod/cross-node: from client (n1, 10.244.0.2) to server-b (n2) 10.244.1.2:8080: expected HTTP 200, got: context deadline exceeded"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "skipped: no kube-dns Service") {
		t.Errorf("table:\n%s\nwant the line %q and the skip reason", out.String(), want)
	}
	err := summary(results)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 scenarios failed (1 passed, 1 skipped): pod-to-pod/cross-node") {
		t.Errorf("summary = %v", err)
	}
	if summary(results[:2]) != nil {
		t.Error("summary without failures is an error")
	}
}

// Every test pod, the host-network one included, runs `myelin connectivity serve`:
// `lab serve` refuses a node's own network namespace.
func TestPodsRunConnectivityServe(t *testing.T) {
	o := Options{Myelin: "/usr/bin/myelin", Image: "img"}
	for _, host := range []bool{false, true} {
		p := podSpec(o, "host", "host", "node-1", host, ":8080")
		cmd := p.Spec.Containers[0].Command
		if len(cmd) < 3 || cmd[1] != "connectivity" || cmd[2] != "serve" {
			t.Errorf("hostNetwork %v: pod command %v, want myelin connectivity serve", host, cmd)
		}
	}
}

// The default image (no registry host) is never pulled; a registry's image may be.
func TestPodPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"myelin/test:v1": corev1.PullNever, "busybox": corev1.PullNever, "docker.io": corev1.PullNever,
		"registry.internal/myelin/test:v1": corev1.PullIfNotPresent, "localhost:5000/test:v1": corev1.PullIfNotPresent,
	} {
		if got := pullPolicy(image); got != want {
			t.Errorf("pullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}
