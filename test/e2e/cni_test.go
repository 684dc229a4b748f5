package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// cniNode drives myelin-cni through libcni inside a lab node's netns, as a runtime does.
type cniNode struct {
	node string
	cni  *libcni.CNIConfig
	conf []byte
}

func newCNINode(t *testing.T, node string) *cniNode {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(paths.CNIConfDir(node), nodelayout.CNIConfFile))
	if err != nil {
		t.Fatalf("the agent did not install its conflist: %v", err)
	}
	return &cniNode{node: node, conf: conf,
		cni: libcni.NewCNIConfigWithCacheDir([]string{paths.CNIBinDir(node)}, t.TempDir(), nil)}
}

func (c *cniNode) list(t *testing.T, version string) *libcni.NetworkConfigList {
	t.Helper()
	b := strings.Replace(string(c.conf), `"cniVersion": "1.0.0"`, `"cniVersion": "`+version+`"`, 1)
	l, err := libcni.ConfListFromBytes([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// in runs f inside the node's netns (the runtime runs there; so the plugin does too).
func (c *cniNode) in(f func(ctx context.Context) error) error {
	return netns.Do(labplan.NetNSPath(c.node), func() error { return f(context.Background()) })
}

func runtimeConf(id, netnsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: netnsPath, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", id}}}
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func ipamUsed(t *testing.T, node string) int {
	return agentStatus(t, node).IPAM.Used
}

// TestLabMyelinCNIConformance runs ADD, CHECK, DEL and DEL again through libcni for
// each supported CNI version, then STATUS and GC, and the error paths: a bad network
// configuration, a failed ADD (nothing left behind), and an agent that is down.
func TestLabMyelinCNIConformance(t *testing.T) {
	requireRoot(t)
	labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	node := labplan.NodeName(1)
	c := newCNINode(t, node)
	podCIDR := netip.MustParsePrefix(agentStatus(t, node).IPAM.CIDR)
	base := ipamUsed(t, node)

	for _, version := range []string{"1.0.0", "1.1.0"} {
		t.Run(version, func(t *testing.T) {
			list := c.list(t, version)
			ns := labplan.PodNSPrefix + "cniconf-" + strings.ReplaceAll(version, ".", "")
			if err := runCmd("ip", "netns", "add", ns); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = runCmd("ip", "netns", "del", ns) }()
			rt := runtimeConf("conformance-"+version, labplan.NetNSPath(ns))
			var res types.Result
			err := c.in(func(ctx context.Context) (err error) {
				res, err = c.cni.AddNetworkList(ctx, list, rt)
				return err
			})
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			cur, err := types100.NewResultFromResult(res)
			if err != nil || res.Version() != version || len(cur.IPs) != 1 || !podCIDR.Contains(netip.MustParseAddr(cur.IPs[0].Address.IP.String())) {
				t.Fatalf("ADD result (version %s): %+v, err %v; want one IP from %v", res.Version(), cur, err, podCIDR)
			}
			if out, err := inNodeNS(ns, "ip", "-4", "addr", "show", "eth0"); err != nil || !strings.Contains(out, cur.IPs[0].Address.IP.String()+"/32") {
				t.Errorf("pod eth0 after ADD: %v %s", err, out)
			}
			if err := c.in(func(ctx context.Context) error { return c.cni.CheckNetworkList(ctx, list, rt) }); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if version == "1.1.0" {
				if err := c.in(func(ctx context.Context) error { return c.cni.GetStatusNetworkList(ctx, list) }); err != nil {
					t.Errorf("STATUS: %v", err)
				}
			}
			for i := 1; i <= 2; i++ {
				if err := c.in(func(ctx context.Context) error { return c.cni.DelNetworkList(ctx, list, rt) }); err != nil {
					t.Errorf("DEL #%d: %v", i, err)
				}
			}
			if used := ipamUsed(t, node); used != base {
				t.Errorf("after DEL, %d IPs in use, want %d", used, base)
			}
			if _, err := api.NewClient(api.NodeSocket(node)).GetEndpoint(context.Background(), rt.ContainerID); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("after DEL the agent still knows the endpoint: %v", err)
			}
			c.reAddAndReap(t, list, rt)
		})
	}

	t.Run("GC", func(t *testing.T) {
		list := c.list(t, "1.1.0")
		var keep []types.GCAttachment
		for _, id := range []string{"gc-keep", "gc-drop"} {
			ns := labplan.PodNSPrefix + id
			if err := runCmd("ip", "netns", "add", ns); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = runCmd("ip", "netns", "del", ns) }()
			if err := c.in(func(ctx context.Context) error {
				_, err := c.cni.AddNetworkList(ctx, list, runtimeConf(id, labplan.NetNSPath(ns)))
				return err
			}); err != nil {
				t.Fatalf("ADD %s: %v", id, err)
			}
		}
		keep = append(keep, types.GCAttachment{ContainerID: "gc-keep", IfName: "eth0"})
		if err := c.in(func(ctx context.Context) error {
			return c.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: keep})
		}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		eps := endpointsOf(t, node)
		if _, ok := eps["gc-keep"]; !ok {
			t.Error("GC removed the attachment it was told to keep")
		}
		if _, ok := eps["gc-drop"]; ok {
			t.Error("GC kept an attachment that was not in the valid list")
		}
		_ = c.in(func(ctx context.Context) error { return c.cni.DelNetworkList(ctx, list, runtimeConf("gc-keep", "")) })
	})

	t.Run("bad network configuration", func(t *testing.T) {
		l, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"myelin","plugins":[{"type":"myelin-cni"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		err = c.in(func(ctx context.Context) error {
			_, err := c.cni.AddNetworkList(ctx, l, runtimeConf("bad-conf", "/run/netns/"+node))
			return err
		})
		if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `"socket" is missing`) {
			t.Errorf("ADD with no socket: %v (code %d), want code 7 naming the socket key", err, cniCode(err))
		}
	})

	t.Run("failed ADD leaves nothing", func(t *testing.T) {
		before := ipamUsed(t, node)
		err := c.in(func(ctx context.Context) error {
			_, err := c.cni.AddNetworkList(ctx, c.list(t, "1.1.0"), runtimeConf("no-netns", "/run/netns/myelin-pod-does-not-exist"))
			return err
		})
		if err == nil {
			t.Fatal("ADD into a missing netns succeeded")
		}
		if used := ipamUsed(t, node); used != before {
			t.Errorf("failed ADD left an IP allocated (%d in use, was %d)", used, before)
		}
		// Its own host veth only: the veths of pods deleted just before (the GC
		// subtest's) go a little later, with the agent's veth reaper, by design.
		if out, _ := inNode(node, "ip", "-o", "link"); strings.Contains(out, api.HostIfName("no-netns")) {
			t.Errorf("failed ADD left its link %s behind:\n%s", api.HostIfName("no-netns"), out)
		}
	})

	t.Run("agent down", func(t *testing.T) {
		killAgent(t, node, true)
		defer releaseAgent(t, node)
		list := c.list(t, "1.1.0")
		// A pod netns of its own: ADD refuses the node's (code 8) before it asks the agent.
		ns := labplan.PodNSPrefix + "agent-down"
		if err := runCmd("ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = runCmd("ip", "netns", "del", ns) }()
		err := c.in(func(ctx context.Context) error {
			_, err := c.cni.AddNetworkList(ctx, list, runtimeConf("agent-down", labplan.NetNSPath(ns)))
			return err
		})
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "myelin status") {
			t.Errorf("ADD with the agent down: %v (code %d), want code 11 with a hint", err, cniCode(err))
		}
		err = c.in(func(ctx context.Context) error { return c.cni.GetStatusNetworkList(ctx, list) })
		if cniCode(err) != types.ErrPluginNotAvailable {
			t.Errorf("STATUS with the agent down: %v (code %d), want code 50 (plugin not available)", err, cniCode(err))
		}
	})
	labDown(t)
}

// reAddAndReap ADDs rt's container again into the same netns right after its DEL
// (the runtime retrying a sandbox): the host veth name and eth0 are the ones DEL
// retired, which the agent may not have deleted yet. Then it DELs again and waits for
// the agent to delete the retired veth pair.
func (c *cniNode) reAddAndReap(t *testing.T, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) {
	t.Helper()
	err := c.in(func(ctx context.Context) error {
		if _, err := c.cni.AddNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("re-ADD after DEL: %w", err)
		}
		if err := c.cni.DelNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("DEL after the re-ADD: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	hostIf := api.HostIfName(rt.ContainerID)
	eventually(t, time.Minute, "the agent deletes the retired veth "+hostIf, func(context.Context) (bool, string) {
		out, err := inNode(c.node, "ip", "-o", "link", "show", hostIf)
		return err != nil && strings.Contains(out, "does not exist"), out // ip names the link in its error too
	})
	if out, err := inNodeNS(filepath.Base(rt.NetNS), "ip", "-o", "link", "show", "eth0"); err == nil || !strings.Contains(out, "does not exist") {
		t.Errorf("the pod's eth0 outlived its retired veth: %s", out)
	}
}

func runCmd(argv ...string) error {
	out, err := execCommand(argv...)
	if err != nil {
		return fmt.Errorf("%v: %v %s", argv, err, out)
	}
	return nil
}

func inNodeNS(ns string, argv ...string) (string, error) { return inNode(ns, argv...) }
