package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/link"
)

// Main runs the plugin; cmd/myelin-cni calls it. An error goes to stdout as the
// spec's error JSON (code, msg, details) and the exit status is 1.
func Main() {
	if e := run(); e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintf(os.Stderr, "myelin-cni: write the error to stdout: %v (the error: %v)\n", err, e)
		}
		os.Exit(1)
	}
}

// run is the plugin on skel, which reads the CNI_* variables and stdin itself; the
// variables are checked first (checkEnv) for errors that name them.
func run() *types.Error {
	if e := checkEnv(os.Getenv); e != nil {
		return e
	}
	return explain(skel.PluginMainFuncsWithError(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus},
		version.PluginSupports(supportedVersions...), "myelin-cni: pod networking by the myelin agent"))
}

// agentError turns an API error into a CNI error: an unreachable or unready agent, a
// pod whose NetworkPolicy the agent could not put in place in time, or another refusal
// the agent says passes by itself (api.ErrRetry) is "try again later" (code 11), which
// makes the runtime retry; the message says which.
func agentError(op string, socket string, err error) error {
	if errors.Is(err, api.ErrUnavailable) {
		return types.NewError(types.ErrTryAgainLater, "the myelin agent on this node is not available, try again later",
			fmt.Sprintf("%s: %v; the runtime retries on its own; check the agent with: myelin status (socket %s)", op, err, socket))
	}
	if errors.Is(err, api.ErrNotAdmitted) {
		return types.NewError(types.ErrTryAgainLater, "the pod's NetworkPolicy is not in place yet, try again later",
			fmt.Sprintf("%s: %v; the runtime retries on its own; check the agent's policy loop and Policy problems with: myelin status, myelin endpoints", op, err))
	}
	if errors.Is(err, api.ErrRetry) {
		return types.NewError(types.ErrTryAgainLater, op+" is not possible yet, try again later",
			fmt.Sprintf("%s: %v; the runtime retries on its own", op, err))
	}
	return types.NewError(types.ErrInternal, op+" failed", err.Error())
}

// setup reads the network configuration and the pod's identity (CNI_ARGS) for cmd,
// whose values must be names (checkPodNames); ADD also checks the identity is whole
// (checkPodIdentity). DEL needs only the configuration's socket (parseConfDel),
// and takes CNI_ARGS it
// cannot read as no identity (which only names the pod in its records): an ADD with
// them failed before it asked for anything, and a DEL that fails keeps the runtime
// from removing the sandbox.
func setup(cmd string, args *skel.CmdArgs) (*NetConf, *api.Client, api.PodRef, error) {
	parse := parseConf
	if cmd == "DEL" {
		parse = parseConfDel
	}
	conf, err := parse(args.StdinData)
	if err != nil {
		return nil, nil, api.PodRef{}, err
	}
	k, err := parseK8sArgs(args.Args)
	if err == nil && cmd == "ADD" {
		err = checkPodIdentity(k)
	}
	if err == nil {
		err = checkPodNames(k)
	}
	if err != nil {
		if cmd != "DEL" {
			return nil, nil, api.PodRef{}, err
		}
		fmt.Fprintf(os.Stderr, "myelin-cni: DEL %s: %v; deleting without the pod's name\n", args.ContainerID, err)
		k = k8sArgs{}
	}
	ref := api.PodRef{
		ContainerID: args.ContainerID, IfName: args.IfName, NetNS: args.Netns,
		Namespace: string(k.K8S_POD_NAMESPACE), Pod: string(k.K8S_POD_NAME), PodUID: string(k.K8S_POD_UID),
	}
	return conf, api.NewClient(conf.Socket), ref, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	conf, client, ref, err := setup("ADD", args)
	if err != nil {
		return err
	}
	// The result names the pod's interfaces and addresses from scratch: after
	// other plugins of a chain, theirs (prevResult) would be dropped, which the
	// spec forbids, and their CHECK would fail against the cached result.
	if conf.RawPrevResult != nil {
		return invalidConf(`network %s: ADD got a "prevResult": myelin-cni must be the first plugin of its chain `+
			`(the agent's 05-myelin.conflist has it first); put it first`, quote(conf.Name))
	}
	if err := checkPodNetNS("ADD", args.Netns); err != nil {
		return err
	}
	ctx, cancel := addContext()
	defer cancel()
	alloc, err := client.Allocate(ctx, ref)
	if err != nil {
		return agentError("allocate a pod IP", conf.Socket, err)
	}
	ep, err := addEndpoint(ctx, client, ref, alloc)
	if err != nil {
		// Leave nothing behind: no link (addEndpoint removed it) and no IP. The release
		// names this ADD's attempt: the agent keeps the IP while another ADD of the
		// container id (a retry of this one, or the one this retries) holds it. It has
		// its own deadline: the ADD's may be what ran out.
		rctx, rcancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer rcancel()
		if rerr := client.Release(rctx, ref.ContainerID, alloc.Attempt); rerr != nil {
			err = fmt.Errorf("%w (and releasing %s failed: %v)", err, alloc.IP, rerr)
		}
		var cniErr *types.Error
		if errors.As(err, &cniErr) {
			return cniErr
		}
		return agentError("set up the pod network", conf.Socket, err)
	}
	return types.PrintResult(result(conf.CNIVersion, args, alloc, ep), conf.CNIVersion)
}

// addContext bounds an ADD's calls to the agent by api.DefaultTimeout (a variable:
// tests end it where they need to).
var addContext = func() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), api.DefaultTimeout)
}

// releaseTimeout bounds the release of a failed ADD's IP, on top of the ADD's own
// deadline, which may be what ran out.
const releaseTimeout = 10 * time.Second

// addEndpoint builds the veth and registers it; on failure it removes the veth.
func addEndpoint(ctx context.Context, client *api.Client, ref api.PodRef, alloc api.Allocation) (api.Endpoint, error) {
	ip, err := netip.ParseAddr(alloc.IP)
	if err != nil {
		return api.Endpoint{}, fmt.Errorf("agent returned a bad IP %q", alloc.IP)
	}
	gw, err := netip.ParseAddr(alloc.Gateway)
	if err != nil {
		return api.Endpoint{}, fmt.Errorf("agent returned a bad gateway %q", alloc.Gateway)
	}
	pl, err := setupVeth(ref.NetNS, ref.IfName, alloc.HostIfName, alloc.MTU, alloc.RouteMTU, alloc.GSOIPv4MaxSize, ip, gw)
	if err != nil {
		return api.Endpoint{}, err
	}
	ep, err := client.PutEndpoint(ctx, api.Endpoint{
		PodRef: ref, IP: alloc.IP, HostIfName: alloc.HostIfName, HostIfIndex: pl.HostIndex,
		HostMAC: pl.HostMAC.String(), PodMAC: pl.PodMAC.String(),
	})
	if err != nil {
		// By index: a DEL and a new ADD of the container may have replaced the veth
		// while this PUT waited; theirs stays.
		_ = link.DeleteAt(pl.HostIndex, alloc.HostIfName)
		return api.Endpoint{}, err
	}
	return ep, nil
}

// ResultOf is the result (CNI 1.0.0) of the ADD that made ep, which a runtime passes
// back to CHECK as its prevResult; for tests that run CHECK as a runtime does.
func ResultOf(ep api.Endpoint) *types100.Result {
	args := &skel.CmdArgs{IfName: ep.IfName, Netns: ep.NetNS}
	return result("1.0.0", args, api.Allocation{IP: ep.IP, Gateway: api.PodGateway}, ep)
}

func result(cniVersion string, args *skel.CmdArgs, alloc api.Allocation, ep api.Endpoint) *types100.Result {
	gw := net.ParseIP(alloc.Gateway)
	return &types100.Result{
		CNIVersion: cniVersion,
		Interfaces: []*types100.Interface{
			{Name: ep.HostIfName, Mac: ep.HostMAC},
			{Name: args.IfName, Mac: ep.PodMAC, Sandbox: args.Netns},
		},
		IPs: []*types100.IPConfig{{
			Interface: types100.Int(1),
			Address:   net.IPNet{IP: net.ParseIP(alloc.IP).To4(), Mask: net.CIDRMask(32, 32)},
			Gateway:   gw,
		}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, GW: gw}},
	}
}

// cmdDel is idempotent: an endpoint, link or netns that is already gone is success.
// The agent removes the pod's map entry and route, releases its IP and retires its
// veth pair: the host side is set down now and the pair deleted after DEL has
// answered (deleting a veth waits for the kernel's RCU; endpoint/reaper.go), so DEL
// leaves the pod's interface to it. With the agent unreachable (down, hung or
// starting) DEL still succeeds: it removes the pod's veth (and with it the /32 route
// and the attached programs) and records the delete for the agent
// (deleteWithoutAgent), which releases the IP and removes the endpoint's map entry
// when it answers again.
func cmdDel(args *skel.CmdArgs) error {
	conf, client, ref, err := setup("DEL", args)
	if err != nil {
		return err
	}
	// The node's own netns has no pod interface to delete, but may have one of the
	// same name (eth0): refuse before anything is changed.
	if kind, why, err := classifyNetNS(args.Netns); err == nil && kind == nsOwn {
		return badNetNS(args.Netns, why)
	}
	hostIf := api.HostIfName(ref.ContainerID)
	ifindex := 0 // the host veth this DEL owns, as the agent must have recorded it
	if l, err := netlink.LinkByName(hostIf); err == nil {
		ifindex = l.Attrs().Index
	}
	ctx, cancel := context.WithTimeout(context.Background(), delTimeout)
	defer cancel()
	err = client.DeleteEndpointOf(ctx, ref.ContainerID, ifindex, args.IfName)
	switch {
	case err == nil && ifindex != 0:
		return nil // the agent retired the pair, the pod's interface with it
	case err == nil:
	case errors.Is(err, api.ErrNotOwner):
		// The agent's record is another attachment's: leave it, remove only this pod's link.
		fmt.Fprintf(os.Stderr, "myelin-cni: DEL %s: %v; leaving the agent's endpoint alone\n", ref.ContainerID, err)
	case errors.Is(err, api.ErrUnavailable):
		// The veth is named by the container id alone: without the agent to ask,
		// a DEL of another interface (net1, whose ADD was refused) must not take
		// eth0's pair. Its peer in the pod's namespace says whose it is.
		if peer, perr := peerNameIn(args.Netns, ifindex); perr == nil && peer != "" && peer != args.IfName {
			fmt.Fprintf(os.Stderr, "myelin-cni: DEL %s: host veth %s is the container's %s, not %s; leaving it\n",
				ref.ContainerID, hostIf, peer, args.IfName)
			return nil
		}
		if derr := deleteWithoutAgent(conf, ref, hostIf, ifindex); derr != nil {
			return types.NewError(types.ErrInternal, "delete the pod network without the agent",
				fmt.Sprintf("%v (the agent was unreachable: %v)", derr, err))
		}
	default:
		return agentError("delete the endpoint", conf.Socket, err)
	}
	if err := deletePodLink(args.Netns, args.IfName); err != nil {
		return types.NewError(types.ErrInternal, "remove the pod interface", err.Error())
	}
	return nil
}

// delTimeout bounds DEL's wait for the agent; a hung agent costs DEL this long before
// it deletes without it.
const delTimeout = 10 * time.Second

// deleteWithoutAgent removes what the node has of the pod without the agent: its host
// veth, the one DEL found at ifindex (deleting the pair, the /32 route through it and
// its programs), then records the delete in api.DeletedDir for the agent to release the IP and remove the
// endpoint's map entry. Until then the map entry leads to a veth that no longer
// exists, so packets to the address are dropped, as they should be.
func deleteWithoutAgent(conf *NetConf, ref api.PodRef, hostIf string, ifindex int) error {
	if err := link.DeleteAt(ifindex, hostIf); err != nil {
		return fmt.Errorf("delete host veth %s: %w", hostIf, err)
	}
	rec := api.DeletedEndpoint{ContainerID: ref.ContainerID, Namespace: ref.Namespace, Pod: ref.Pod,
		HostIfName: hostIf, HostIfIndex: ifindex, Deleted: time.Now(), DeletedBoot: api.BootNow()}
	if err := api.WriteDeleted(api.DeletedDir(conf.Socket), rec); err != nil {
		return fmt.Errorf("%w; the agent releases the IP at its next start (its veth is gone)", err)
	}
	fmt.Fprintln(os.Stderr, deletedWithoutAgent(ref, hostIf, ifindex, api.DeletedDir(conf.Socket)))
	return nil
}

// deletedWithoutAgent is what DEL logs when it deleted without the agent.
func deletedWithoutAgent(ref api.PodRef, hostIf string, ifindex int, dir string) string {
	pod := ""
	if ref.Pod != "" {
		pod = fmt.Sprintf(" (pod %s/%s)", ref.Namespace, ref.Pod)
	}
	did := "removed " + hostIf
	if ifindex == 0 {
		did = "found no " + hostIf + " to remove"
	}
	return fmt.Sprintf("myelin-cni: DEL %s%s: the agent was unreachable; %s and left the delete for the agent in %s", ref.ContainerID, pod, did, dir)
}

func cmdStatus(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.DefaultTimeout)
	defer cancel()
	h, err := api.NewClient(conf.Socket).Health(ctx)
	if err == nil && !h.Ready {
		err = fmt.Errorf("%w: not ready: %s", api.ErrUnavailable, h.Reason)
	}
	if err == nil {
		return nil
	}
	// The spec's STATUS code for "cannot serve ADD" is 50, not 11: the datapath of the
	// node's pods keeps running without the agent, so never 51 (limited connectivity).
	e := agentError("check the agent", conf.Socket, err)
	var cniErr *types.Error
	if errors.As(e, &cniErr) && cniErr.Code == types.ErrTryAgainLater {
		cniErr.Code = types.ErrPluginNotAvailable
	}
	return e
}

func cmdGC(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	keep, err := gcKeep(args.StdinData, conf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.DefaultTimeout)
	defer cancel()
	if _, err := api.NewClient(conf.Socket).GC(ctx, keep); err != nil {
		return agentError("garbage-collect endpoints", conf.Socket, err)
	}
	return nil
}
