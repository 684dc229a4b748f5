package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
)

// cmdCheck verifies that the endpoint is known to the agent and that the pod's
// interface still has its address, gateway neighbour and default route.
func cmdCheck(args *skel.CmdArgs) error {
	conf, client, ref, err := setup(args)
	if err != nil {
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
	if _, err := netlink.LinkByName(ep.HostIfName); err != nil {
		return types.NewError(types.ErrInternal, "host veth missing", fmt.Sprintf("%s: %v", ep.HostIfName, err))
	}
	if err := netns.Do(args.Netns, func() error { return checkPod(args.IfName, ep) }); err != nil {
		return types.NewError(types.ErrInternal, "pod interface check failed", err.Error())
	}
	return nil
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
			if r.Gw != nil && r.Gw.Equal(net.ParseIP(Gateway)) {
				return nil
			}
		}
	}
	return fmt.Errorf("interface %s has no default route via %s", ifName, Gateway)
}

// Gateway is the link-local next hop of every pod's default route. Its neighbour entry
// is fixed to the host-side veth's MAC, so the address itself is never on a link.
const Gateway = "169.254.1.1"
