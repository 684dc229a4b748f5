package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// connectivity runs servers on every node (HTTP over TCP from a DaemonSet, sockperf
// over UDP from another, an HTTP server in node-2's host network) and checks ICMP, TCP
// and UDP from a client pod on node-1 to every server (same node and across nodes),
// pod to node, and node to pod.
func connectivity(t *testing.T, cs kubernetes.Interface, nodes int) {
	t.Helper()
	deployConnectivity(t, cs)
	checkConnectivity(t, cs, nodes)
}

// deployConnectivity creates the servers and the client of the connectivity checks.
func deployConnectivity(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	for _, ds := range []struct {
		name string
		cmd  []string
	}{
		{"web", []string{myelinBin, "lab", "serve", "--listen", ":8080"}},
		{"udp", []string{"sockperf", "server", "-i", "0.0.0.0", "-p", "11111"}},
	} {
		if _, err := cs.AppsV1().DaemonSets("default").Create(ctx, serverDaemonSet(ds.name, ds.cmd...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	hostWeb := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host-web", Labels: map[string]string{"app": "host-web"}},
		Spec: hostPod("host-web", myelinBin, "lab", "serve", "--listen", ":8080")}
	hostWeb.Spec.HostNetwork, hostWeb.Spec.NodeName = true, n2
	if _, err := cs.CoreV1().Pods("default").Create(ctx, hostWeb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createService(t, cs, "host-web", "host-web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
}

// checkConnectivity runs ICMP, TCP and UDP from the client to every server, pod to
// node and node to pod.
func checkConnectivity(t *testing.T, cs kubernetes.Interface, nodes int) {
	t.Helper()
	ctx := context.Background()
	n1 := labplan.NodeName(1)
	web := runningPods(t, cs, "app=web", nodes)
	udp := runningPods(t, cs, "app=udp", nodes)
	runningPods(t, cs, "app=client", 1)
	hostWebIP := runningPods(t, cs, "app=host-web", 1)[0].Status.PodIP

	fromClient := func(argv ...string) (string, error) { return inPod("client", argv...) }
	for _, p := range web {
		where := fmt.Sprintf("client (%s) to %s on %s", n1, p.Name, p.Spec.NodeName)
		checkPing(t, where, fromClient, p.Status.PodIP)
		checkTCP(t, where, fromClient, p.Status.PodIP, p.Name)
	}
	for _, p := range udp {
		checkUDP(t, fmt.Sprintf("client (%s) to %s on %s", n1, p.Name, p.Spec.NodeName), fromClient, p.Status.PodIP)
	}
	// Pod to node: every node's IP answers ping; node-2's host network serves HTTP.
	nodeList, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodeList.Items {
		checkPing(t, "client to node "+n.Name, fromClient, n.Status.Addresses[0].Address)
	}
	checkTCP(t, "client to node-2's host network", fromClient, hostWebIP, "host-web")
	// NodePort of node-2's host network, on node-2's IP: node-2 serves it itself. From
	// outside and from node-1's host, whose packets arrive on node-2's uplink, and from
	// the client pod on node-1 (in tunnel mode the reply to a pod goes back through the
	// overlay).
	svc, err := cs.CoreV1().Services("default").Get(ctx, "host-web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostNodePort := fmt.Sprintf("%s:%d", hostWebIP, nodePortOf(t, svc))
	waitProgrammed(t, labplan.NodeName(2), hostNodePort+"/TCP", 1)
	for _, from := range []struct {
		name string
		run  func(...string) (string, error)
	}{
		{labplan.ExtNS, func(argv ...string) (string, error) { return inNode(labplan.ExtNS, argv...) }},
		{n1, func(argv ...string) (string, error) { return inNode(n1, argv...) }},
		{"the client pod on " + n1, fromClient},
	} {
		out, err := from.run("curl", "-sS", "-m", "5", "http://"+hostNodePort+"/")
		if err != nil || !strings.HasPrefix(out, "server=host-web ") {
			t.Errorf("NodePort %s (node-2's host network) from %s: %v %q, want an answer from host-web", hostNodePort, from.name, err, out)
		}
	}
	// Node to pod: from each node to a pod on node-1 (local for node-1, remote for others).
	target := podsOn(web)[n1][0]
	for i := 1; i <= nodes; i++ {
		node := labplan.NodeName(i)
		fromNode := func(argv ...string) (string, error) { return inNode(node, argv...) }
		checkPing(t, node+" to "+target.Name, fromNode, target.Status.PodIP)
		checkTCP(t, node+" to "+target.Name, fromNode, target.Status.PodIP, target.Name)
	}
}

func setHostRouting(t *testing.T, cs kubernetes.Interface, value string) {
	t.Helper()
	setConfig(t, cs, "host-routing", value)
}

// setConfig sets one key of the myelin-config ConfigMap.
func setConfig(t *testing.T, cs kubernetes.Interface, key, value string) {
	t.Helper()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(config.ConfigMapNamespace).Get(ctx, config.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[key] = value
	if _, err := cs.CoreV1().ConfigMaps(config.ConfigMapNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func expectHostRouting(t *testing.T, node, mode, reason string) {
	t.Helper()
	st := agentStatus(t, node)
	if st.Routing.HostRouting != mode || !strings.Contains(st.Routing.HostRoutingReason, reason) {
		t.Errorf("%s: host routing %s (%s), want %s with a reason containing %q",
			node, st.Routing.HostRouting, st.Routing.HostRoutingReason, mode, reason)
	}
}

// TestLabMyelinBPF: three nodes in native routing with BPF host routing; ICMP, TCP and
// UDP on one node and across nodes, pod to node and node to pod; thirty pods all
// reachable from one client; status and a drop seen by the monitor with its reason;
// no route to a Node that claims half of node-2's PodCIDR.
func TestLabMyelinBPF(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "native")
	for i := 1; i <= 3; i++ {
		expectHostRouting(t, labplan.NodeName(i), "BPF", "every requirement")
	}
	st := agentStatus(t, labplan.NodeName(1))
	if st.Routing.Mode != "native" || st.Routing.Routes != 2 || st.Nodes.Known != 3 || !st.Kubernetes.Connected {
		t.Errorf("status of node-1: %+v; want native routing, 2 node routes, 3 nodes, connected", st)
	}
	connectivity(t, cs, 3)
	checkMTU(t, cs, 1500)        // native routing: pods use the full MTU
	checkBIGTCP(t, cs, true, "") // the lab's profile turns it on (bigtcp_test.go)
	thirtyPods(t, cs)
	monitorShowsDrop(t)
	statusCLI(t)
	lyingNodeRefused(t, cs) // lyingnode_test.go
	nodeRouteFollowsNodes(t, cs)
	labDown(t)
}

// statusCLI checks what an operator sees: the text and JSON forms of myelin status.
func statusCLI(t *testing.T) {
	t.Helper()
	out, err := myelin("status", "--node", labplan.NodeName(1))
	for _, want := range []string{"Host: BPF (auto: every requirement", "IPAM:", "from 10.244.", "Ok, v1.34.4",
		"DROP_NO_ROUTE", "FORWARDED", "myelin_endpoints"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("myelin status: %v, output lacks %q:\n%s", err, want, out)
			break
		}
	}
	out, err = myelin("status", "--all", "-o", "json")
	var all []api.Status
	if err != nil || json.Unmarshal([]byte(out), &all) != nil || len(all) != 3 {
		t.Errorf("myelin status --all -o json: %v, want 3 nodes:\n%s", err, out)
	}
}

// nodeRouteFollowsNodes deletes node-3's Node object and expects node-1 to drop its
// route to node-3's PodCIDR (auto-direct-node-routes follows Nodes as they go).
func nodeRouteFollowsNodes(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	n3, err := cs.CoreV1().Nodes().Get(ctx, labplan.NodeName(3), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cidr := n3.Spec.PodCIDR
	if out, _ := inNode(labplan.NodeName(1), "ip", "route", "show", cidr); !strings.Contains(out, "via 198.18.0.13") {
		t.Fatalf("node-1 has no route to node-3's %s: %q", cidr, out)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, labplan.NodeName(3), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "node-1's route to the deleted node-3 removed", func(context.Context) (bool, string) {
		out, _ := inNode(labplan.NodeName(1), "ip", "route", "show", cidr)
		return strings.TrimSpace(out) == "", out
	})
}

// thirtyPods spreads 30 HTTP servers over the nodes and checks the client reaches all.
func thirtyPods(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	d := webDeployment(30)
	d.Name = "many"
	d.Spec.Selector.MatchLabels = map[string]string{"app": "many"}
	d.Spec.Template.Labels = map[string]string{"app": "many"}
	d.Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels = map[string]string{"app": "many"}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := runningPods(t, cs, "app=many", 30)
	for _, p := range pods {
		checkTCP(t, "client to "+p.Name+" on "+p.Spec.NodeName, func(argv ...string) (string, error) { return inPod("client", argv...) },
			p.Status.PodIP, p.Name)
	}
	st := agentStatus(t, labplan.NodeName(1))
	if st.Endpoints < 10 || st.IPAM.Used != st.Endpoints {
		t.Errorf("node-1 after 30 pods: %d endpoints, IPAM %d/%d; want >= 10 and equal", st.Endpoints, st.IPAM.Used, st.IPAM.Total)
	}
}

// monitorShowsDrop blackholes a range on node-1, pings it from the client, and expects
// `myelin monitor --type drop` to report DROP_NO_ROUTE with the client's pod name.
func monitorShowsDrop(t *testing.T) {
	t.Helper()
	n1 := labplan.NodeName(1)
	if out, err := inNode(n1, "ip", "route", "add", "blackhole", "10.99.0.0/16"); err != nil {
		t.Fatalf("add blackhole route: %v %s", err, out)
	}
	ev := awaitDrop(t, n1, "DROP_NO_ROUTE", func() { _, _ = inPod("client", "ping", "-c", "1", "-W", "1", "10.99.1.1") })
	if ev.Type != "drop" || ev.SrcPod != "default/client" || ev.Dst != "10.99.1.1" || ev.Direction != "from-pod" {
		t.Errorf("drop event = %+v, want a from-pod drop from default/client to 10.99.1.1", ev)
	}
}

// awaitDrop watches `myelin monitor --type drop` on node and runs provoke (about
// once a second) until a drop event with reason arrives, which it returns; it fails
// the test after 30 s without one.
func awaitDrop(t *testing.T, node, reason string, provoke func()) api.Event {
	t.Helper()
	return awaitDropMatching(t, node, reason, func(api.Event) bool { return true }, provoke)
}

// awaitDropMatching is awaitDrop for the first drop of reason that match accepts.
func awaitDropMatching(t *testing.T, node, reason string, match func(api.Event) bool, provoke func()) api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mon := exec.CommandContext(ctx, myelinBin, "monitor", "--node", node, "--type", "drop", "-o", "json")
	stdout, err := mon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = mon.Wait() }()
	found := make(chan api.Event, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev api.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Reason == reason && match(ev) {
				found <- ev
				return
			}
		}
	}()
	deadline := time.After(30 * time.Second)
	for {
		provoke()
		select {
		case ev := <-found:
			return ev
		case <-deadline:
			t.Fatalf("myelin monitor on %s showed no %s event", node, reason)
		case <-time.After(time.Second):
		}
	}
}

// TestLabMyelinLegacy: the same connectivity with legacy host routing.
func TestLabMyelinLegacy(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "native-legacy")
	for i := 1; i <= 3; i++ {
		expectHostRouting(t, labplan.NodeName(i), "Legacy", "host-routing is legacy (ConfigMap kube-system/myelin-config)")
	}
	out, err := inNode(labplan.NodeName(1), "iptables", "-S", "MYELIN-FORWARD")
	if err != nil || !strings.Contains(out, "-s 10.244.0.0/16") {
		t.Errorf("legacy mode: MYELIN-FORWARD chain = %v %s", err, out)
	}
	connectivity(t, cs, 3)
	labDown(t)
}

// TestLabMyelinMixed: node-2 restarts into legacy host routing while the others stay in
// BPF mode; the cluster keeps full connectivity across the modes.
func TestLabMyelinMixed(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "native")
	setHostRouting(t, cs, "legacy")
	killAgent(t, labplan.NodeName(2), false) // the restarted agent reads the new configuration
	expectHostRouting(t, labplan.NodeName(1), "BPF", "")
	expectHostRouting(t, labplan.NodeName(2), "Legacy", "host-routing is legacy")
	connectivity(t, cs, 3)
	labDown(t)
}
