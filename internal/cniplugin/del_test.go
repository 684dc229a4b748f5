package cniplugin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
)

func cniArgs(socket, containerID, podNetns string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: containerID, Netns: podNetns, IfName: "eth0",
		Args:      "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + containerID,
		StdinData: []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":%q}`, socket))}
}

// delWithoutAgent builds a pod's veth, runs DEL against an agent that does not
// answer (socket as given), and checks that DEL succeeded, removed the veth and left
// the delete for the agent with the veth's index.
func delWithoutAgent(t *testing.T, socket, containerID string) {
	t.Helper()
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	hostIf := api.HostIfName(containerID)
	err := netns.Do(host, func() error {
		l, err := setupVeth(pod, "eth0", hostIf, 1500, 1500, 0, netip.MustParseAddr("10.244.7.9"), netip.MustParseAddr(api.PodGateway))
		if err != nil {
			return err
		}
		if err := cmdDel(cniArgs(socket, containerID, pod)); err != nil {
			return fmt.Errorf("DEL with the agent unreachable = %w, want success", err)
		}
		if _, err := netlink.LinkByName(hostIf); err == nil {
			return fmt.Errorf("host veth %s still there after DEL", hostIf)
		}
		recs, err := api.ReadDeleted(api.DeletedDir(socket))
		if err != nil || len(recs) != 1 {
			return fmt.Errorf("recorded deletes = %v, %v; want one", recs, err)
		}
		for _, r := range recs {
			if r.ContainerID != containerID || r.HostIfIndex != l.HostIndex || r.HostIfName != hostIf || r.Pod != containerID {
				return fmt.Errorf("recorded delete %+v, want container %s veth %s index %d", r, containerID, hostIf, l.HostIndex)
			}
		}
		// A repeated DEL (the runtime retries) still succeeds and keeps the veth's index.
		if err := cmdDel(cniArgs(socket, containerID, pod)); err != nil {
			return fmt.Errorf("repeated DEL = %w, want success", err)
		}
		recs, err = api.ReadDeleted(api.DeletedDir(socket))
		for _, r := range recs {
			if r.HostIfIndex != l.HostIndex {
				return fmt.Errorf("after a repeated DEL the record has index %d, want %d", r.HostIfIndex, l.HostIndex)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// With the agent down, a DEL of another interface of the container (net1, whose
// ADD was refused: the host veth is named by the container id alone) leaves eth0's
// pair and records nothing; eth0's own DEL then deletes it.
func TestPrivilegedDelOfAnotherInterfaceWithAgentDown(t *testing.T) {
	requireRoot(t)
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	hostIf := api.HostIfName("ctr-two")
	err := netns.Do(host, func() error {
		if _, err := setupVeth(pod, "eth0", hostIf, 1500, 1500, 0, netip.MustParseAddr("10.244.7.9"), netip.MustParseAddr(api.PodGateway)); err != nil {
			return err
		}
		net1 := cniArgs(socket, "ctr-two", pod)
		net1.IfName = "net1"
		if err := cmdDel(net1); err != nil {
			return fmt.Errorf("DEL of net1 = %w, want success", err)
		}
		if _, err := netlink.LinkByName(hostIf); err != nil {
			return fmt.Errorf("DEL of net1 deleted eth0's host veth %s: %v", hostIf, err)
		}
		if recs, err := api.ReadDeleted(api.DeletedDir(socket)); err != nil || len(recs) != 0 {
			return fmt.Errorf("DEL of net1 recorded deletes %v, %v; want none", recs, err)
		}
		if err := cmdDel(cniArgs(socket, "ctr-two", pod)); err != nil {
			return fmt.Errorf("DEL of eth0 = %w, want success", err)
		}
		if _, err := netlink.LinkByName(hostIf); err == nil {
			return fmt.Errorf("host veth %s still there after eth0's DEL", hostIf)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CNI DEL succeeds with no agent on the socket, removing the pod's veth and recording
// the delete; ADD keeps failing with "try again later".
func TestPrivilegedDelWithAgentDown(t *testing.T) {
	requireRoot(t)
	socket := filepath.Join(t.TempDir(), "agent.sock")
	delWithoutAgent(t, socket, "ctr-down")

	err := cmdAdd(cniArgs(socket, "ctr-new", throwawayNetNS(t, "pod")))
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater || !strings.Contains(cniErr.Msg, "try again later") {
		t.Errorf("ADD with the agent down = %#v, want CNI error 11 (try again later)", err)
	}
}

// A hung agent (accepts, never answers) is the same as a down one, after delTimeout.
func TestPrivilegedDelWithAgentHung(t *testing.T) {
	requireRoot(t)
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	delWithoutAgent(t, socket, "ctr-hung")
}

// DEL with CNI_ARGS it cannot read deletes all the same (the pod's name is only for its
// records): a failing DEL keeps the runtime from removing the sandbox, for ever.
func TestDelWithBadCNIArgs(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent: DEL deletes without it
	for _, bad := range []string{"K8S_POD_NAME=a=b", "K8S_POD_NAMESPACE=ns;OTHER=x", "K8S_POD_NAME=p"} {
		args := cniArgs(socket, "ctr-badargs", "")
		args.Args = bad
		if err := cmdDel(args); err != nil {
			t.Errorf("DEL with CNI_ARGS %q = %v, want success", bad, err)
		}
	}
	recs, err := api.ReadDeleted(api.DeletedDir(socket))
	if err != nil || len(recs) != 1 {
		t.Fatalf("deletes left for the agent: %v, %v; want the one of ctr-badargs", recs, err)
	}
	for _, r := range recs {
		if r.ContainerID != "ctr-badargs" {
			t.Errorf("delete left for the agent: %+v, want ctr-badargs's", r)
		}
	}
}

// DEL needs only the configuration's socket: with a key ADD refuses ("mtu",
// "ipam"), it deletes the pod anyway (or one mistake in the configuration file
// would keep every pod of the node Terminating), where ADD fails with code 7.
func TestDelWithRefusedConfKeys(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent: DEL deletes without it
	for i, extra := range []string{`"mtu":1450`, `"ipam":{"type":"host-local"}`, `"ipam":{"subnet":"10.1.0.0/16"}`} {
		id := fmt.Sprintf("ctr-refused-%d", i)
		args := cniArgs(socket, id, "")
		args.StdinData = []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":%q,%s}`, socket, extra))
		if err := cmdDel(args); err != nil {
			t.Errorf("DEL with %s = %v, want success", extra, err)
		}
		var ce *types.Error
		if err := cmdAdd(args); !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("ADD with %s = %v, want code 7", extra, err)
		}
	}
	if recs, err := api.ReadDeleted(api.DeletedDir(socket)); err != nil || len(recs) != 3 {
		t.Errorf("deletes left for the agent: %v, %v; want the three DELs'", recs, err)
	}
}

// ADD after other plugins of a chain (a "prevResult") is refused before anything
// is asked of the agent or built: its result would drop theirs.
func TestAddRefusesPrevResult(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent: a call to it would be code 11
	args := cniArgs(socket, "ctr-chained", "")
	args.StdinData = []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":%q,`+
		`"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}}`, socket))
	var ce *types.Error
	if err := cmdAdd(args); !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Details, "first plugin") {
		t.Errorf("ADD with a prevResult = %v, want code 7 saying myelin-cni must be first", err)
	}
}

// DEL with the agent down records the delete of any container id the spec allows:
// one longer than a file name holds failed, and with it the DEL, until the agent was back.
func TestDelOfALongContainerIDWithAgentDown(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent
	id := "c" + strings.Repeat("0123456789abcdef", 20) // 321 bytes
	if err := cmdDel(cniArgs(socket, id, "")); err != nil {
		t.Fatalf("DEL of a %d-byte container id with the agent down = %v, want success", len(id), err)
	}
	recs, err := api.ReadDeleted(api.DeletedDir(socket))
	if err != nil || len(recs) != 1 {
		t.Fatalf("deletes left for the agent: %v, %v; want one", recs, err)
	}
	for _, r := range recs {
		if r.ContainerID != id {
			t.Errorf("the delete left for the agent names container %q, want the whole id", r.ContainerID)
		}
	}
}

// DEL with CNI_NETNS the plugin's own netns (here a throwaway "node" netns the test
// runs in) and the host veth already gone is refused (code 8), and the node's link of
// CNI_IFNAME's name stays: before, DEL removed it as the pod's interface.
func TestPrivilegedDelOwnNetNSKeepsNodeLink(t *testing.T) {
	requireRoot(t)
	node := throwawayNetNS(t, "node")
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent
	err := netns.Do(node, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0peer"}); err != nil {
			return fmt.Errorf("add the node's eth0: %w", err)
		}
		err := cmdDel(cniArgs(socket, "ctr-own", node))
		var cniErr *types.Error
		if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetNS {
			t.Errorf("DEL with CNI_NETNS the plugin's own netns = %v, want code 8", err)
		}
		if _, err := netlink.LinkByName("eth0"); err != nil {
			t.Errorf("the node's eth0 after DEL: %v, want it kept", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What DEL logs without the agent says whether it found the host veth, and names the
// pod only when it knows it.
func TestDeletedWithoutAgentLog(t *testing.T) {
	for _, c := range []struct {
		ref     api.PodRef
		ifindex int
		want    string
	}{
		{api.PodRef{ContainerID: "c1", Namespace: "ns", Pod: "p"}, 7, "myelin-cni: DEL c1 (pod ns/p): the agent was unreachable; removed myl1 and left"},
		{api.PodRef{ContainerID: "c1"}, 0, "myelin-cni: DEL c1: the agent was unreachable; found no myl1 to remove and left"},
	} {
		if got := deletedWithoutAgent(c.ref, "myl1", c.ifindex, "/run/myelin/cni-deleted"); !strings.HasPrefix(got, c.want) {
			t.Errorf("deletedWithoutAgent(%+v, %d) = %q, want %q...", c.ref, c.ifindex, got, c.want)
		}
	}
}
