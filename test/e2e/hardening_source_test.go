package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabMyelinSpoofing attacks from a pod as a hostile tenant would, on a
// 2-node lab (native routing, BPF host routing). The attacker adds other
// addresses to its eth0 (a pod's of its node, a pod's of the other node,
// both node IPs, a Service's ClusterIP, an outside address) and sends UDP
// and TCP SYNs from each to a pod on its node and a pod on the other node,
// and a VLAN-tagged datagram from its own address: captures in both targets
// see none of them (its genuine packets arrive), and node-1 counts
// DROP_SPOOFED_SOURCE. Then it sends IPv6 router
// advertisements: node-1 gets no new IPv6 address or route, and counts
// DROP_UNSUPPORTED_L3. Then node-1's own namespace (a hostNetwork pod)
// sends raw packets from a pod of node-1 to both targets: neither arrives.
// Then the control plane's host, on the underlay beside the nodes, sends
// one as a pod of node-1 to another: node-1's uplink drops it (its status
// names its PodCIDR as checked). Last, a host on a second network of
// node-1 (a device no myelin program is on) does the same through node-1's
// stack: the drop is where the stack delivers into the pod.
func TestLabMyelinSpoofing(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	placement := map[string]string{"attacker": n1, "neighbour": n1, "near": n1, "far": n2, "impersonated": n2}
	for name, node := range placement {
		createPod(t, cs, name, node, map[string]string{"app": name}, "sleep", "infinity")
	}
	pods := map[string]corev1.Pod{}
	for name := range placement {
		pods[name] = runningPods(t, cs, "app="+name, 1)[0]
	}
	if st := agentStatus(t, n1); !st.SourceCheck.Enabled {
		t.Fatalf("node-1 source validation off (%+v), want on by default", st.SourceCheck)
	}
	kube, err := cs.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := []string{pods["neighbour"].Status.PodIP, pods["impersonated"].Status.PodIP,
		"198.18.0.11", "198.18.0.12", kube.Spec.ClusterIP, "203.0.113.10"}
	spoofFromPod(t, n1, pods, forged)
	advertiseFromPod(t, n1, pods["attacker"])
	// A hostNetwork process of node-1 with CAP_NET_RAW forges a pod of its node.
	forgeRawFromHost(t, cs, n1, pods["neighbour"], pods["near"], pods["far"])
	// A host on the underlay forges a pod of node-1 to another.
	node1, err := cs.CoreV1().Nodes().Get(context.Background(), n1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := agentStatus(t, n1); st.SourceCheck.UplinkPodCIDR != node1.Spec.PodCIDR {
		t.Errorf("node-1 checks %q from the uplink (%+v), want its PodCIDR %s", st.SourceCheck.UplinkPodCIDR, st.SourceCheck, node1.Spec.PodCIDR)
	}
	forgeFromUnderlay(t, pods["neighbour"], pods["near"], true)
	forgeFromSecondNetwork(t, n1, pods["neighbour"], pods["near"])
	labDown(t)
}

// spoofFromPod sends forged UDP and TCP from the attacker to the near and
// far pods and checks that only its genuine packets reach them.
func spoofFromPod(t *testing.T, node string, pods map[string]corev1.Pod, forged []string) {
	t.Helper()
	targets := []corev1.Pod{pods["near"], pods["far"]}
	caps := captureIn(t, targets)
	before := dropCount(t, node, "DROP_SPOOFED_SOURCE")
	var dsts []netip.Addr
	for _, p := range targets {
		dsts = append(dsts, netip.MustParseAddr(p.Status.PodIP))
	}
	own := netip.MustParseAddr(pods["attacker"].Status.PodIP)
	var srcs []netip.Addr
	for _, f := range forged {
		srcs = append(srcs, netip.MustParseAddr(f))
	}
	closeTCP, err := sendForged(podNetNS(pods["attacker"]), own, srcs, dsts)
	if err != nil {
		t.Fatalf("send from the attacker pod: %v", err)
	}
	defer closeTCP()
	for i, c := range caps {
		got, err := c.sourcesUntil(own, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		genuine := false
		for _, f := range got {
			genuine = genuine || (f.src == own && f.udpPort == 9999)
			if slices.Contains(srcs, f.src) {
				t.Errorf("%s (%s) received a packet from the forged source %s", targets[i].Name, targets[i].Spec.NodeName, f.src)
			}
			if f.udpPort == taggedPort {
				t.Errorf("%s (%s) received the attacker's 802.1Q-tagged datagram", targets[i].Name, targets[i].Spec.NodeName)
			}
		}
		if !genuine {
			t.Errorf("%s saw no genuine packet from the attacker %s (frames seen: %v): the capture proves nothing", targets[i].Name, own, got)
		}
	}
	want := uint64(2 * len(srcs) * len(dsts)) // one UDP datagram and at least one SYN each
	if got := dropCount(t, node, "DROP_SPOOFED_SOURCE") - before; got < want {
		t.Errorf("%s DROP_SPOOFED_SOURCE grew by %d, want >= %d", node, got, want)
	}
}

// forgeFromUnderlay sends, from the control plane's namespace (a host on the
// underlay's segment, with a route to each PodCIDR through its node), raw UDP to
// target from the pod impersonated (of target's node), then from its own address:
// target sees only the latter, and its node's uplink counts the forgery (from-netdev
// DROP_SPOOFED_SOURCE), so it arrived there and the drop is the check's. With
// dropped false (the check off) target sees both and nothing is counted.
func forgeFromUnderlay(t *testing.T, impersonated, target corev1.Pod, dropped bool) {
	t.Helper()
	forgeFrom(t, labplan.CPNS, labplan.DefaultAddressing().ControlPlaneIP(), impersonated, target, "from-netdev", dropped)
}

// forgeFrom sends, from netns ns, raw UDP to target from the pod impersonated, then
// from control (ns's own address): target sees only the latter, and target's node
// counts the forgery under dir (DROP_SPOOFED_SOURCE grows by one at least); with
// dropped false, target sees both and the count stays.
func forgeFrom(t *testing.T, ns string, control netip.Addr, impersonated, target corev1.Pod, dir string, dropped bool) {
	t.Helper()
	node := target.Spec.NodeName
	forged := netip.MustParseAddr(impersonated.Status.PodIP)
	caps := captureIn(t, []corev1.Pod{target})
	before := counter(t, node, dir, "DROP_SPOOFED_SOURCE")
	err := netns.Do(labplan.NetNSPath(ns), func() error {
		for _, src := range []netip.Addr{forged, control} {
			if err := sendRawUDP(src, netip.MustParseAddr(target.Status.PodIP)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send from %s: %v", ns, err)
	}
	if !dropped {
		expectBoth(t, caps[0], target, control, forged)
		if got := counter(t, node, dir, "DROP_SPOOFED_SOURCE") - before; got != 0 {
			t.Errorf("%s %s/DROP_SPOOFED_SOURCE grew by %d with the check off, want 0", node, dir, got)
		}
		return
	}
	expectOnly(t, caps, []corev1.Pod{target}, control, forged)
	if got := counter(t, node, dir, "DROP_SPOOFED_SOURCE") - before; got < 1 {
		t.Errorf("%s %s/DROP_SPOOFED_SOURCE grew by %d, want >= 1 (the forged datagram)", node, dir, got)
	}
}

// expectBoth checks that pod's capture saw the forged datagram and the control's.
func expectBoth(t *testing.T, c *capture, pod corev1.Pod, control, forged netip.Addr) {
	t.Helper()
	from, _ := forgedPortSources(t, c, control)
	if !slices.Contains(from, control) || !slices.Contains(from, forged) {
		t.Errorf("%s (%s) saw datagrams from %v, want both %s (forged, the check off) and %s", pod.Name, pod.Spec.NodeName,
			from, forged, control)
	}
}

// forgeFromSecondNetwork gives node a second network, a veth to a namespace of its own
// (myelin-forger: lab down removes it with the lab's others), and sends from there,
// routed by node's stack, raw UDP to target (a pod of node) from the pod impersonated
// (of node too), then from the forger's own address: target sees only the latter, and
// node counts the forgery where the stack delivered it (to-pod DROP_SPOOFED_SOURCE).
func forgeFromSecondNetwork(t *testing.T, node string, impersonated, target corev1.Pod) {
	t.Helper()
	const ns, dev = "myelin-forger", "myelin-second"
	forger := netip.MustParseAddr("192.0.2.2")
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, argv := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", node, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", node, "addr", "add", "192.0.2.1/24", "dev", dev},
		{"ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.conf." + dev + ".rp_filter=0"},
		// A namespace inherits the host's all.rp_filter: strict, the stack would drop
		// the forgery before myelin sees it. The lab's namespace goes with the lab.
		{"ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"},
		{"ip", "-n", node, "link", "set", dev, "up"},
		{"ip", "-n", ns, "addr", "add", forger.String() + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", target.Status.PodIP + "/32", "via", "192.0.2.1"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(argv, " "), err, out)
		}
	}
	forgeFrom(t, ns, forger, impersonated, target, "to-pod", true)
}

// advertiseFromPod sends IPv6 router advertisements (default router, an
// autoconfiguration prefix) from the attacker and checks that its node's
// IPv6 addresses and routes stay as they were.
func advertiseFromPod(t *testing.T, node string, attacker corev1.Pod) {
	t.Helper()
	const count = 20
	addrs, routes := nodeIPv6(t, node)
	before := dropCount(t, node, "DROP_UNSUPPORTED_L3")
	if err := sendRouterAdvertisements(podNetNS(attacker), count); err != nil {
		t.Fatalf("send router advertisements from %s: %v", attacker.Name, err)
	}
	eventually(t, 10*time.Second, "router advertisements dropped", func(context.Context) (bool, string) {
		got := dropCount(t, node, "DROP_UNSUPPORTED_L3") - before
		return got >= count, fmt.Sprintf("DROP_UNSUPPORTED_L3 grew by %d, want >= %d", got, count)
	})
	addrsAfter, routesAfter := nodeIPv6(t, node)
	if addrsAfter != addrs || routesAfter != routes {
		t.Errorf("%s IPv6 changed after the pod's router advertisements:\naddresses before:\n%s\nafter:\n%s\nroutes before:\n%s\nafter:\n%s",
			node, addrs, addrsAfter, routes, routesAfter)
	}
	if strings.Contains(addrsAfter+routesAfter, raPrefix) {
		t.Errorf("%s took the advertised prefix %s", node, raPrefix)
	}
}

// nodeIPv6 returns a node's IPv6 addresses and routes as ip prints them.
func nodeIPv6(t *testing.T, node string) (string, string) {
	t.Helper()
	addrs, err := inNode(node, "ip", "-6", "-br", "addr")
	if err != nil {
		t.Fatalf("ip -6 addr in %s: %v %s", node, err, addrs)
	}
	routes, err := inNode(node, "ip", "-6", "route")
	if err != nil {
		t.Fatalf("ip -6 route in %s: %v %s", node, err, routes)
	}
	return addrs, routes
}

// dropCount is a node's from-pod counter of reason, in packets.
func dropCount(t *testing.T, node, reason string) uint64 {
	t.Helper()
	return counter(t, node, "from-pod", reason)
}
