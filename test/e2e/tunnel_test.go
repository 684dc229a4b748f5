package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/datapath"
	labmyelin "github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// checkMTU pings from the client (node-1) to a pod on node-2 with DF set at the largest
// payload that fits the pod's route MTU, then one byte more, which must be refused with
// the route MTU named.
func checkMTU(t *testing.T, cs kubernetes.Interface, routeMTU int) {
	t.Helper()
	var target string
	for _, p := range runningPods(t, cs, "app=web", 3) {
		if p.Spec.NodeName == labplan.NodeName(2) {
			target = p.Status.PodIP
		}
	}
	fits := routeMTU - 28 // IPv4 + ICMP headers
	out, err := inPod("client", "ping", "-c", "1", "-W", "2", "-M", "do", "-s", strconv.Itoa(fits), target)
	if err != nil || !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping -M do -s %d (fits MTU %d) to %s: %v\n%s", fits, routeMTU, target, err, out)
	}
	out, err = inPod("client", "ping", "-c", "1", "-W", "2", "-M", "do", "-s", strconv.Itoa(fits+1), target)
	if err == nil || !strings.Contains(out, "message too long, mtu="+strconv.Itoa(routeMTU)) {
		t.Errorf("ping -M do -s %d (one byte over MTU %d) to %s: %v\n%s; want 'message too long, mtu=%d'", fits+1, routeMTU, target, err, out, routeMTU)
	}
}

// TestLabMyelinTunnel: VXLAN tunnel mode with BPF host routing: status, connectivity,
// MTU (devices keep 1500, pod routes carry 1450), then node-2 moved to legacy host
// routing and node-3 to the tunnel by the device by NodeConfigs: the mixed cluster
// keeps full connectivity, also once node-1 sends its pods' packets to the others'
// IPs through the overlay (tunnel-pod-to-node encapsulate).
func TestLabMyelinTunnel(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "tunnel")
	st := agentStatus(t, labplan.NodeName(1))
	if st.Routing.Mode != "tunnel" || st.Routing.HostRouting != "BPF" || st.Routing.Routes != 2 || st.Routing.Tunnel != "BPF" ||
		st.MTU.Device != 1500 || st.MTU.Route != 1450 {
		t.Errorf("status: routing %+v, MTU %+v; want tunnel, BPF, 2 tunnels encapsulated by BPF, device 1500 route 1450", st.Routing, st.MTU)
	}
	if out, err := inNode(labplan.NodeName(1), "ip", "-d", "link", "show", "myelin_vxlan"); err != nil || !strings.Contains(out, "external") || !strings.Contains(out, "dstport 8472") {
		t.Errorf("myelin_vxlan: %v\n%s; want a collect-metadata (external) device on port 8472", err, out)
	}
	connectivity(t, cs, 3)
	checkMTU(t, cs, 1450)
	checkBIGTCP(t, cs, false, "myelin_vxlan") // on in the profile, but the VXLAN device can't
	// A hostNetwork process of node-1 (BPF host routing) forges pods' packets:
	// VXLAN of its own to node-2, raw packets into the overlay and into a pod.
	webOn := podsByNode(runningPods(t, cs, "app=web", 3))
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	forgeVXLANFromHost(t, cs, n1, webOn[n1], webOn[n2])
	forgeRawFromHost(t, cs, n1, runningPods(t, cs, "app=client", 1)[0], webOn[n1], webOn[n2])

	createNodeConfig(t, "legacy", map[string]string{"kubernetes.io/hostname": labplan.NodeName(2)}, map[string]string{"host-routing": "legacy"})
	restartAgent(t, labplan.NodeName(2))
	expectHostRouting(t, labplan.NodeName(2), "Legacy", "NodeConfig kube-system/legacy")
	expectHostRouting(t, labplan.NodeName(1), "BPF", "")
	forgeVXLANFromHost(t, cs, n2, webOn[n2], webOn[n1]) // node-2's stack encapsulates now
	// node-3 leaves its VXLAN to the device (enable-bpf-tunnel false): it still talks
	// to node-1, which encapsulates and decapsulates in BPF, and to legacy node-2.
	createNodeConfig(t, "device-tunnel", map[string]string{"kubernetes.io/hostname": labplan.NodeName(3)}, map[string]string{"enable-bpf-tunnel": "false"})
	restartAgent(t, labplan.NodeName(3))
	expectHostRouting(t, labplan.NodeName(3), "BPF", "")
	for node, want := range map[string]string{labplan.NodeName(1): "BPF", labplan.NodeName(2): "myelin_vxlan", labplan.NodeName(3): "myelin_vxlan"} {
		if st := agentStatus(t, node); st.Routing.Tunnel != want {
			t.Errorf("%s: VXLAN encapsulated by %q (%s), want %s", node, st.Routing.Tunnel, st.Routing.TunnelReason, want)
		}
	}
	if st := agentStatus(t, labplan.NodeName(3)); !strings.Contains(st.Routing.TunnelReason, "enable-bpf-tunnel is false (NodeConfig kube-system/device-tunnel)") {
		t.Errorf("%s: tunnel reason %q, want it to name enable-bpf-tunnel and the NodeConfig", labplan.NodeName(3), st.Routing.TunnelReason)
	}
	checkConnectivity(t, cs, 3)

	// node-1 encapsulates its pods' packets to the other nodes' IPs
	// (tunnel-pod-to-node): node-2 receives them with legacy host routing (the
	// client reaches its host network and that NodePort), node-3 with the tunnel
	// left to the device.
	n3 := labplan.NodeName(3)
	createNodeConfig(t, "pod-to-node", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"tunnel-pod-to-node": "encapsulate"})
	restartAgent(t, n1)
	expectOtherNodesPods(t, n1, "tunnel-pod-to-node is encapsulate")
	checkConnectivity(t, cs, 3)
	pingThroughOverlay(t, "client", n3, nodeIP(t, cs, n3))
	// node-2, legacy host routing, sends its pods' packets to the others' IPs
	// through the overlay by its stack (a rule to the encap routes of table 2030): a
	// web pod there reaches node-3's health responder, whose packets come out of
	// node-3's overlay.
	createNodeConfig(t, "pod-to-node-2", map[string]string{"kubernetes.io/hostname": n2},
		map[string]string{"tunnel-pod-to-node": "encapsulate", "host-routing": "legacy"})
	deleteNodeConfig(t, "legacy")
	restartAgent(t, n2)
	expectHostRouting(t, n2, "Legacy", "NodeConfig kube-system/pod-to-node-2")
	expectOtherNodesPods(t, n2, "tunnel-pod-to-node is encapsulate")
	// The tunnel loop's first sync after the restart puts the rule in.
	eventually(t, time.Minute, n2+"'s rule from its PodCIDR to table 2030", func(context.Context) (bool, string) {
		out, err := inNode(n2, "ip", "rule", "show")
		return err == nil && strings.Contains(out, "lookup 2030"), out
	})
	ip3 := nodeIP(t, cs, n3).String()
	url := "http://" + ip3 + ":4240/hello"
	if out, err := inPod(webOn[n2].Name, "curl", "-sS", "-m", "5", url); err != nil || !strings.Contains(out, n3) {
		t.Errorf("%s from %s (legacy, encapsulating): %v %q, want node-3's hello", url, webOn[n2].Name, err, out)
	}
	// The stack's decision for that pod's packets, arriving on its veth: the overlay.
	// (Counters can't tell: node-3's health probes come out of its overlay too.)
	pod := webOn[n2].Status.PodIP
	out, err := inNode(n2, "ip", "-o", "route", "get", pod)
	fields := strings.Fields(out)
	veth := ""
	for i := range fields[:max(len(fields)-1, 0)] {
		if fields[i] == "dev" {
			veth = fields[i+1]
		}
	}
	if err != nil || veth == "" {
		t.Fatalf("%s: ip route get %s: %v %q, want its host veth", n2, pod, err, out)
	}
	out, err = inNode(n2, "ip", "-o", "route", "get", ip3, "from", pod, "iif", veth)
	if err != nil || !strings.Contains(out, "dev "+tunnel.DeviceName) || !strings.Contains(out, "table 2030") {
		t.Errorf("%s: ip route get %s from %s iif %s: %v %q, want the encap route of table 2030 into %s", n2, ip3, pod, veth, err, out, tunnel.DeviceName)
	}

	// A ClusterIP Service over the web servers of all three nodes: translated on the
	// client's node, the backends on other nodes reached through the tunnel.
	svc := createService(t, cs, "web", "web", nil)
	waitProgrammed(t, labplan.NodeName(1), svc.Spec.ClusterIP+":80/TCP", 3)
	web := runningPods(t, cs, "app=web", 3)
	client := runningPods(t, cs, "app=client", 1)[0]
	run := func(argv ...string) (string, error) { return inPod("client", argv...) }
	seen := serversOfAll(t, "ClusterIP in tunnel mode", run, "http://"+svc.Spec.ClusterIP+"/", client.Status.PodIP, podNames(web)...)
	expectServers(t, "ClusterIP in tunnel mode", seen, podNames(web)...)
	labDown(t)
}

// TestLabMyelinTunnelLegacy: tunnel mode with legacy host routing everywhere; the
// kernel encapsulates through encap routes.
func TestLabMyelinTunnelLegacy(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "tunnel-legacy")
	expectHostRouting(t, labplan.NodeName(1), "Legacy", "host-routing is legacy")
	connectivity(t, cs, 3)
	checkMTU(t, cs, 1450)

	// Geneve stops the agent with the reason: this kernel lacks the driver (probed here
	// the same way the agent probes it), or this build does not support it.
	want := "tunnel-protocol geneve (set by ConfigMap kube-system/myelin-config) is not supported by this build; use vxlan"
	if err := datapath.ProbeTunnelProtocol("geneve"); err != nil {
		want = "tunnel-protocol geneve: this kernel cannot create Geneve devices"
	}
	setConfig(t, cs, "tunnel-protocol", "geneve")
	signalAgent(t, labplan.NodeName(3))
	eventually(t, time.Minute, "agent refuses geneve", func(context.Context) (bool, string) {
		b, _ := os.ReadFile(paths.Log(labmyelin.AgentProcess(labplan.NodeName(3))))
		return strings.Contains(string(b), want), lastLines(string(b), 2)
	})
	labDown(t)
}

// TestLabMyelinL3Underlay: nodes on two subnets behind the lab router. Native routing
// with auto-direct-node-routes installs no route to a node on the other segment and
// says so in status; after switching the cluster to tunnel mode every pod reaches
// every other across the router.
func TestLabMyelinL3Underlay(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "3", "--cni", "myelin", "--profile", "native", "--underlay", "l3")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	st := agentStatus(t, n1)
	if len(st.Routing.Unroutable) != 1 || !strings.HasPrefix(st.Routing.Unroutable[0], n2+": node IP 198.18.1.12 is not on this node's L2 segment") || st.Routing.Routes != 1 {
		t.Errorf("native on an L3 underlay: routes %d, unroutable %q; want 1 route (node-3) and node-2 named as unroutable", st.Routing.Routes, st.Routing.Unroutable)
	}
	if out, _ := inNode(n1, "ip", "route"); strings.Contains(out, "via 198.18.1.12") {
		t.Errorf("node-1 has a route via node-2 on another segment:\n%s", out)
	}
	out, err := myelin("status", "--node", n1)
	if err != nil || !strings.Contains(out, "no route:") {
		t.Errorf("myelin status does not name the unroutable node: %v\n%s", err, out)
	}

	setConfig(t, cs, "routing-mode", "tunnel")
	setConfig(t, cs, "auto-direct-node-routes", "false")
	for i := 1; i <= 3; i++ {
		restartAgent(t, labplan.NodeName(i))
	}
	if st := agentStatus(t, n1); st.Routing.Mode != "tunnel" || st.Routing.Routes != 2 {
		t.Errorf("after the switch: %+v, want tunnel mode with 2 tunnels", st.Routing)
	}
	connectivity(t, cs, 3)
	labDown(t)
}
