package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// TestLabFlannel runs the peer stack users would run instead of myelin: Flannel with
// etcd as its store and the reference bridge + host-local plugins, once per backend (one
// lab at a time). Pods on both nodes reach each other on the same node and across nodes,
// the backend is really the one asked for, flanneld masquerades traffic leaving the pod
// network, the root netns gets none of flannel's rules, and lab down removes it all.
func TestLabFlannel(t *testing.T) {
	requireRoot(t)
	for _, backend := range labplan.FlannelBackends {
		t.Run(backend, func(t *testing.T) { testFlannel(t, backend) })
	}
}

func testFlannel(t *testing.T, backend string) {
	cs := labUp(t, "--nodes", "2", "--cni", "flannel", "--flannel-backend", backend)
	plan, err := lab.LoadPlan(paths)
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := plan.Nodes[0], plan.Nodes[1]
	subnet := map[string]flannel.Subnet{}
	for _, n := range plan.Nodes {
		b, err := os.ReadFile(paths.FlannelSubnetFile(n.Name))
		if err != nil {
			t.Fatalf("flanneld's subnet file of %s: %v", n.Name, err)
		}
		if subnet[n.Name], err = flannel.ParseSubnet(b); err != nil {
			t.Fatal(err)
		}
	}
	if subnet[n1.Name].Subnet.Masked() == subnet[n2.Name].Subnet.Masked() {
		t.Fatalf("both nodes leased flannel subnet %v", subnet[n1.Name].Subnet)
	}
	checkFlannelBackend(t, backend, n1, n2, subnet[n2.Name])
	checkFlannelBackend(t, backend, n2, n1, subnet[n1.Name])

	labels := map[string]string{"app": "flannel-srv"}
	serve := []string{myelinBin, "lab", "serve", "--listen", ":8080"}
	createPod(t, cs, "srv-1", n1.Name, labels, serve...)
	createPod(t, cs, "srv-2", n2.Name, labels, serve...)
	createPod(t, cs, "client", n1.Name, map[string]string{"app": "flannel-client"}, "sleep", "infinity")
	servers := runningPods(t, cs, "app=flannel-srv", 2)
	client := runningPods(t, cs, "app=flannel-client", 1)[0]
	for _, p := range append(servers, client) {
		s := subnet[p.Spec.NodeName]
		if ip := netip.MustParseAddr(p.Status.PodIP); !s.Subnet.Masked().Contains(ip) {
			t.Errorf("pod %s on %s has IP %v outside the node's flannel subnet %v", p.Name, p.Spec.NodeName, ip, s.Subnet)
		}
	}

	run := func(argv ...string) (string, error) { return inPod(client.Name, argv...) }
	for _, p := range servers {
		where := "same node"
		if p.Spec.NodeName != client.Spec.NodeName {
			where = "across nodes"
		}
		t.Logf("%s: client → %s (%s)", where, p.Name, p.Status.PodIP)
		checkPing(t, client.Name, run, p.Status.PodIP)
		checkTCP(t, client.Name, run, p.Status.PodIP, p.Name)
	}
	if out, err := run("ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(out, fmt.Sprintf(" mtu %d ", subnet[n1.Name].MTU)) {
		t.Errorf("client eth0: %v %q, want the MTU of flannel's subnet file (%d)", err, out, subnet[n1.Name].MTU)
	}
	// flanneld runs with --ip-masq: traffic leaving the pod network leaves as the node.
	ext := fmt.Sprintf("http://%s/", plan.Addressing.ExternalServerIP())
	want := fmt.Sprintf("server=%s client=%s\n", labplan.ExtNS, n1.IP)
	if out, err := run("curl", "-sS", "-m", "5", ext); err != nil || out != want {
		t.Errorf("curl %s from the client: %v %q, want %q (masqueraded by flanneld)", ext, err, out, want)
	}
	if out, err := execCommand("iptables-save"); err != nil || strings.Contains(out, "FLANNEL") {
		t.Errorf("iptables-save in the root netns: %v; flannel's rules must not be there:\n%s", err, out)
	}

	labDown(t)
}

// checkFlannelBackend checks that node reaches peer's subnet the way backend does it:
// vxlan through a flannel.1 VXLAN device, host-gw by a route via the peer's IP.
func checkFlannelBackend(t *testing.T, backend string, node, peer labplan.Node, peerSubnet flannel.Subnet) {
	t.Helper()
	dst := peerSubnet.Subnet.Masked().String()
	route, err := inNode(node.Name, "ip", "route", "show", dst)
	if err != nil {
		t.Fatalf("routes of %s: %v\n%s", node.Name, err, route)
	}
	link, linkErr := inNode(node.Name, "ip", "-d", "link", "show", flannel.VXLANDevice)
	switch backend {
	case labplan.FlannelVXLAN:
		if linkErr != nil || !strings.Contains(link, "vxlan id 1 ") {
			t.Errorf("%s: want a VXLAN device %s (VNI 1): %v\n%s", node.Name, flannel.VXLANDevice, linkErr, link)
		}
		if !strings.Contains(route, "dev "+flannel.VXLANDevice) {
			t.Errorf("%s: route to %s's subnet %s = %q, want it through %s", node.Name, peer.Name, dst, route, flannel.VXLANDevice)
		}
	case labplan.FlannelHostGW:
		if linkErr == nil {
			t.Errorf("%s: host-gw backend, yet a %s device exists:\n%s", node.Name, flannel.VXLANDevice, link)
		}
		if !strings.Contains(route, "via "+peer.IP.String()+" dev eth0") {
			t.Errorf("%s: route to %s's subnet %s = %q, want it via %s dev eth0", node.Name, peer.Name, dst, route, peer.IP)
		}
	}
}
