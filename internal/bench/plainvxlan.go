package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
)

// Names and numbers of the plain kernel VXLAN overlay. The devices live inside the lab
// nodes' namespaces (removed with them by lab down); the two pod namespaces are named
// with the bench prefix.
const (
	vxlanDevice = "bench-vx"  // the VXLAN device in each node, over its eth0
	vxlanBridge = "bench-br"  // the pods' bridge in each node (what cni0 is to Flannel)
	vxlanVeth   = "bench-vxp" // the node end of the pod's veth
	vxlanVNI    = "4242"
	vxlanPort   = "4789"
	vxlanMTU    = "1450" // eth0's 1500 less the 50 bytes of VXLAN over IPv4
)

// plainVXLAN is pods over plain kernel VXLAN, built by hand the way Flannel's vxlan
// backend builds it, with no Kubernetes in the path: in each of two lab nodes a VXLAN
// device over eth0 (static FDB and neighbour entries, no learning) and a bridge with one
// pod namespace behind it on a veth. Node i's pods are 198.19.(100+i).0/24 (the
// benchmarking range, clear of the lab's); the VXLAN device holds .0, the bridge .1,
// the pod .2. Traffic between the pods crosses the same underlay as node-to-node.
type plainVXLAN struct {
	prefix         string // of the pod namespaces' names
	client, server int    // lab node indexes
}

func (v plainVXLAN) available() error {
	if _, err := exec.LookPath("bridge"); err != nil {
		return errors.New("needs bridge from iproute2: run make setup")
	}
	return nil
}

func (v plainVXLAN) podNS(node int) string { return fmt.Sprintf("%svx-%d", v.prefix, node) }

// vxlanSubnet is the pod subnet of lab node i.
func vxlanSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(100 + i), 0}), 24)
}

func vxlanHost(i, host int) netip.Addr {
	a := vxlanSubnet(i).Addr().As4()
	a[3] = byte(host)
	return netip.AddrFrom4(a)
}

// vxlanMAC is the fixed, locally administered MAC of node i's VXLAN device, so that
// the peers' FDB and neighbour entries can be written up front.
func vxlanMAC(i int) string { return fmt.Sprintf("02:6d:62:00:00:%02x", i) }

func (v plainVXLAN) setup(ctx context.Context, c *Cluster, _ string) (Endpoints, error) {
	plan, err := lab.LoadPlan(c.Paths)
	if err != nil {
		return Endpoints{}, err
	}
	var nodes []vxlanNode
	for _, i := range []int{v.client, v.server} {
		n, ok := plan.Node(labplan.NodeName(i))
		if !ok {
			return Endpoints{}, fmt.Errorf("the lab has no node %s", labplan.NodeName(i))
		}
		nodes = append(nodes, vxlanNode{index: i, ip: n.IP})
	}
	for _, n := range nodes {
		if err := addNetNS(ctx, v.podNS(n.index)); err != nil {
			return Endpoints{}, err
		}
	}
	for _, step := range vxlanSteps(nodes, v.podNS) {
		if err := runArgv(ctx, step); err != nil {
			return Endpoints{}, err
		}
	}
	return Endpoints{
		Client:     NetNSHost{Path: netns.Path(v.podNS(v.client))},
		Server:     NetNSHost{Path: netns.Path(v.podNS(v.server))},
		ServerAddr: vxlanHost(v.server, 2),
	}, nil
}

// A vxlanNode is a lab node of the overlay: its index and its eth0 address.
type vxlanNode struct {
	index int
	ip    netip.Addr
}

// vxlanSteps are the commands that build the overlay between the nodes, with podNS
// naming each node's pod namespace. Pure, so it can be read and tested on its own.
func vxlanSteps(nodes []vxlanNode, podNS func(int) string) [][]string {
	var steps [][]string
	for _, n := range nodes {
		i, ip := n.index, n.ip
		node, pod := labplan.NodeName(i), podNS(i)
		in := func(args ...string) { steps = append(steps, append([]string{"ip", "-n", node}, args...)) }
		inPod := func(args ...string) { steps = append(steps, append([]string{"ip", "-n", pod}, args...)) }
		in("link", "add", vxlanDevice, "address", vxlanMAC(i), "type", "vxlan", "id", vxlanVNI,
			"dev", "eth0", "local", ip.String(), "dstport", vxlanPort, "nolearning")
		in("addr", "add", netip.PrefixFrom(vxlanHost(i, 0), 32).String(), "dev", vxlanDevice)
		in("link", "set", vxlanDevice, "up")
		in("link", "add", vxlanBridge, "mtu", vxlanMTU, "type", "bridge")
		in("addr", "add", netip.PrefixFrom(vxlanHost(i, 1), 24).String(), "dev", vxlanBridge)
		in("link", "set", vxlanBridge, "up")
		in("link", "add", vxlanVeth, "mtu", vxlanMTU, "type", "veth", "peer", "name", "eth0", "mtu", vxlanMTU, "netns", pod)
		in("link", "set", vxlanVeth, "master", vxlanBridge, "up")
		inPod("addr", "add", netip.PrefixFrom(vxlanHost(i, 2), 24).String(), "dev", "eth0")
		inPod("link", "set", "eth0", "up")
		inPod("link", "set", "lo", "up")
		inPod("route", "add", "default", "via", vxlanHost(i, 1).String())
		for _, peer := range nodes {
			j := peer.index
			if j == i {
				continue
			}
			gw := vxlanHost(j, 0).String()
			in("route", "add", vxlanSubnet(j).String(), "via", gw, "dev", vxlanDevice, "onlink")
			in("neigh", "add", gw, "lladdr", vxlanMAC(j), "dev", vxlanDevice, "nud", "permanent")
			steps = append(steps, []string{"bridge", "-n", node, "fdb", "append", vxlanMAC(j), "dev", vxlanDevice, "dst", peer.ip.String()})
		}
	}
	return steps
}

// teardown deletes the pod namespaces (and with them the veths) and the devices in the
// nodes, which may already be gone with the lab.
func (v plainVXLAN) teardown(*Cluster) error {
	var errs []error
	for _, i := range []int{v.client, v.server} {
		errs = append(errs, delNetNS(v.podNS(i)))
		node := labplan.NodeName(i)
		if _, err := os.Stat(labplan.NetNSPath(node)); err != nil {
			continue
		}
		for _, dev := range []string{vxlanDevice, vxlanBridge} {
			err := ip(context.Background(), "-n", node, "link", "del", dev)
			if err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// runArgv runs one command, naming it and its output in the error.
func runArgv(ctx context.Context, argv []string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %s (%w)", strings.Join(argv, " "), strings.TrimSpace(string(out)), err)
	}
	return nil
}
