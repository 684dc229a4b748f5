package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
)

// cmdCheck verifies that the endpoint is known to the agent, that the pod's interface
// still has its address, gateway neighbour and default route, and that the datapath
// serves it (map entry and programs, checked by the agent). A failure names the pod,
// what is wrong and what to do.
func cmdCheck(args *skel.CmdArgs) error {
	conf, client, ref, err := setup("CHECK", args)
	if err != nil {
		return err
	}
	if err := checkPodNetNS("CHECK", args.Netns); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.DefaultTimeout)
	defer cancel()
	ep, err := client.GetEndpoint(ctx, ref.ContainerID)
	if errors.Is(err, api.ErrNotFound) {
		return types.NewError(types.ErrUnknownContainer, "unknown container",
			fmt.Sprintf("the agent has no endpoint for container %s", ref.ContainerID))
	}
	if err != nil {
		return agentError("look up the endpoint", conf.Socket, err)
	}
	pod := fmt.Sprintf("pod %s/%s (container %s)", ep.Namespace, ep.Pod, ep.ContainerID)
	if _, err := netlink.LinkByName(ep.HostIfName); err != nil {
		return types.NewError(types.ErrInternal, "host veth missing",
			fmt.Sprintf("%s: host veth %s: %v; delete the pod so it is recreated", pod, ep.HostIfName, err))
	}
	if err := netns.Do(args.Netns, func() error { return checkPod(args.IfName, ep) }); err != nil {
		return types.NewError(types.ErrInternal, "pod interface check failed", pod+": "+err.Error())
	}
	return checkDatapath(ctx, client, conf, pod, ep)
}

// checkDatapath asks the agent whether the datapath serves the endpoint: its map
// entry (IP to the pod's veth and MACs) and myelin_from_pod/myelin_to_pod on its veth.
func checkDatapath(ctx context.Context, client *api.Client, conf *NetConf, pod string, ep api.Endpoint) error {
	res, err := client.CheckEndpoint(ctx, ep.ContainerID)
	if err != nil {
		return agentError("check the endpoint's datapath", conf.Socket, err)
	}
	if len(res.Problems) == 0 {
		return nil
	}
	return types.NewError(types.ErrInternal, "pod datapath broken",
		fmt.Sprintf("%s, IP %s on %s: %s; restart the myelin agent on this node (it re-programs every endpoint at start) or delete the pod",
			pod, ep.IP, ep.HostIfName, strings.Join(res.Problems, "; ")))
}

func checkPod(ifName string, ep api.Endpoint) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifName, err)
	}
	if link.Attrs().HardwareAddr.String() != ep.PodMAC {
		return fmt.Errorf("interface %s has MAC %s, the agent recorded %s", ifName, link.Attrs().HardwareAddr, ep.PodMAC)
	}
	addrs, err := netlink.AddrList(link, unix.AF_INET)
	if err != nil {
		return err
	}
	want := ep.IP + "/32"
	found := false
	for _, a := range addrs {
		found = found || a.IPNet.String() == want
	}
	if !found {
		return fmt.Errorf("interface %s lacks its address %s", ifName, want)
	}
	routes, err := netlink.RouteList(link, unix.AF_INET)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			if r.Gw != nil && r.Gw.Equal(net.ParseIP(api.PodGateway)) {
				return nil
			}
		}
	}
	return fmt.Errorf("interface %s has no default route via %s", ifName, api.PodGateway)
}
