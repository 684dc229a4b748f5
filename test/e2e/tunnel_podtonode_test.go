package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
)

// TestLabMyelinTunnelPodToNode rolls tunnel-pod-to-node out as docs/datapath.md says
// ("Pods to other nodes"), checking at each step that pods still reach everything
// (pods, both nodes' IPs, node-2's host network and its NodePort, a NodePort served by
// pods of both nodes) and what an underlay host forging a pod of node-1 gets at node-2's
// IP:
//   - plain everywhere: the forgery reaches node-2's host (the gap this closes);
//   - node-2 encapsulate (NodeConfig), node-1 still plain: node-2 counts node-1's pods'
//     plain packets (PLAIN_POD_TO_NODE), the audit before enforce;
//   - encapsulate everywhere: the count stays still while the pod reaches node-2,
//     whose overlay now carries that traffic with the pod's own address;
//   - enforce everywhere: the forgery is dropped as spoofed on node-2's uplink, and one
//     sent into a pod of node-2 through a second network of node-2 at its to-pod.
func TestLabMyelinTunnelPodToNode(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "tunnel")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	ip2 := nodeIP(t, cs, n2)
	deployConnectivity(t, cs)
	checkConnectivity(t, cs, 2)
	client := runningPods(t, cs, "app=client", 1)[0]
	web := runningPods(t, cs, "app=web", 2)
	np := createService(t, cs, "web-np", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	npURL := fmt.Sprintf("http://%s:%d/", ip2, np.Spec.Ports[0].NodePort)
	waitProgrammed(t, n2, fmt.Sprintf("%s:%d/TCP", ip2, np.Spec.Ports[0].NodePort), 2)
	hostWeb := fmt.Sprintf("http://%s:8080/", ip2)
	// node-2's hostNetwork server sees the pod's own address, plain or through the overlay.
	reachNode2 := func(step string) {
		t.Helper()
		checkClientSeen(t, func(argv ...string) (string, error) { return inPod("client", argv...) }, hostWeb, "host-web", client.Status.PodIP)
		run := func(argv ...string) (string, error) { return inPod("client", argv...) }
		seen := serversOfAll(t, step+": NodePort on node-2 from a pod of node-1", run, npURL, "", podNames(web)...)
		expectServers(t, step+": NodePort on node-2 from a pod of node-1", seen, podNames(web)...)
	}
	expectOtherNodesPods(t, n2, "tunnel-pod-to-node is plain")
	reachNode2("plain")
	if seen := forgeToNode(t, n2, ip2, client); !slices.Contains(seen, netip.MustParseAddr(client.Status.PodIP)) {
		t.Errorf("plain: node-2's host saw %v, want the underlay's forgery from %s too (nothing checks it)", seen, client.Status.PodIP)
	}

	createNodeConfig(t, "pod-to-node", map[string]string{"kubernetes.io/hostname": n2}, map[string]string{"tunnel-pod-to-node": "encapsulate"})
	restartAgent(t, n2)
	expectOtherNodesPods(t, n2, "tunnel-pod-to-node is encapsulate, NodeConfig kube-system/pod-to-node")
	plain := counter(t, n2, "from-netdev", "PLAIN_POD_TO_NODE")
	reachNode2("node-2 encapsulate, node-1 plain")
	if got := counter(t, n2, "from-netdev", "PLAIN_POD_TO_NODE") - plain; got == 0 {
		t.Errorf("node-2 encapsulate, node-1 plain: PLAIN_POD_TO_NODE on node-2 did not grow, want node-1's pod's plain packets counted")
	}

	deleteNodeConfig(t, "pod-to-node")
	setConfig(t, cs, "tunnel-pod-to-node", "encapsulate")
	restartAgent(t, n1)
	restartAgent(t, n2)
	plain = counter(t, n2, "from-netdev", "PLAIN_POD_TO_NODE")
	reachNode2("encapsulate")
	checkConnectivity(t, cs, 2)
	pingThroughOverlay(t, "client", n2, ip2)
	if got := counter(t, n2, "from-netdev", "PLAIN_POD_TO_NODE") - plain; got != 0 {
		t.Errorf("encapsulate everywhere: PLAIN_POD_TO_NODE on node-2 grew by %d, want 0", got)
	}

	setConfig(t, cs, "tunnel-pod-to-node", "enforce")
	restartAgent(t, n1)
	restartAgent(t, n2)
	expectOtherNodesPods(t, n2, "only through the overlay")
	reachNode2("enforce")
	checkConnectivity(t, cs, 2)
	spoofed := counter(t, n2, "from-netdev", "DROP_SPOOFED_SOURCE")
	if seen := forgeToNode(t, n2, ip2, client); slices.Contains(seen, netip.MustParseAddr(client.Status.PodIP)) {
		t.Errorf("enforce: node-2's host saw %v, want the underlay's forgery from %s dropped", seen, client.Status.PodIP)
	}
	if got := counter(t, n2, "from-netdev", "DROP_SPOOFED_SOURCE") - spoofed; got < 1 {
		t.Errorf("enforce: node-2 from-netdev DROP_SPOOFED_SOURCE grew by %d, want >= 1 (the forgery)", got)
	}
	forgeFromSecondNetwork(t, n2, client, podsOn(web)[n2][0])
	labDown(t)
}

// pingThroughOverlay pings ip (node's) 50 times from pod, quickly, and checks that
// node's overlay handed at least those 50 echo requests to its stack: they came
// encapsulated. (The peers' health probes to node's health address come that way
// too, a few packets a second: not 50 in the half second the pings take.)
func pingThroughOverlay(t *testing.T, pod, node string, ip netip.Addr) {
	t.Helper()
	const n = 50
	before := counter(t, node, "from-overlay", "PASS_STACK")
	if out, err := inPod(pod, "ping", "-q", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "2", ip.String()); err != nil {
		t.Errorf("ping %s from %s: %v %s", ip, pod, err, out)
	}
	if got := counter(t, node, "from-overlay", "PASS_STACK") - before; got < n {
		t.Errorf("%s: from-overlay PASS_STACK grew by %d while %s pinged its IP %d times, want >= %d: the pings came plain", node, got, pod, n, n)
	}
}

// expectOtherNodesPods checks node's status line of other nodes' pods.
func expectOtherNodesPods(t *testing.T, node, want string) {
	t.Helper()
	if got := agentStatus(t, node).SourceCheck.OtherNodesPods; !strings.Contains(got, want) {
		t.Errorf("%s status: other nodes' pods %q, want it to contain %q", node, got, want)
	}
}

// forgeToNode sends from the underlay (the control plane's namespace) raw UDP to a
// socket on node's IP, first from the pod impersonated, then from the control plane's
// own address, and returns the sources the socket saw until the latter arrived.
func forgeToNode(t *testing.T, node string, ip netip.Addr, impersonated corev1.Pod) []netip.Addr {
	t.Helper()
	var conn *net.UDPConn
	err := netns.Do(labplan.NetNSPath(node), func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip.AsSlice(), Port: forgedPort})
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s:%d in %s: %v", ip, forgedPort, node, err)
	}
	defer conn.Close()
	control := labplan.DefaultAddressing().ControlPlaneIP()
	err = netns.Do(labplan.NetNSPath(labplan.CPNS), func() error {
		for _, src := range []netip.Addr{netip.MustParseAddr(impersonated.Status.PodIP), control} {
			if err := sendRawUDP(src, ip); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send from %s: %v", labplan.CPNS, err)
	}
	var seen []netip.Addr
	buf := make([]byte, 2048)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for !slices.Contains(seen, control) {
		_, from, err := conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s:%d on %s saw %v, never the control datagram from %s", ip, forgedPort, node, seen, control)
		}
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, from.Addr().Unmap())
	}
	return seen
}
