package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/iptables"
	"github.com/myelin-net/myelin/internal/link"
	"github.com/myelin-net/myelin/internal/nodelayout"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// hostVethPrefix starts the name of every pod's host-side veth (endpoint.HostIfName).
const hostVethPrefix = "myl"

// Cleanup removes everything the agent put on this node, for an uninstall (the
// chart's cleanup mode, docs/install.md): the conflist first (the runtime stops
// calling myelin-cni), the plugin, the pods' host veths (their pods lose their
// network, which they have lost anyway without myelin) and with them the /32 routes
// and the programs on them, the pod-to-node rule and table (tunnel-pod-to-node with
// legacy host routing), the VXLAN device, the health address, myelin's node routes, the iptables
// chains MYELIN-FORWARD and MYELIN-POSTROUTING, the BPF pins (unpinning the TCX links
// detaches the uplink's programs; the maps go with their last reference) and the
// state directory. What is already gone is no error; every failure is reported.
func Cleanup(cfg Config, log *slog.Logger) error {
	release, err := cleanupLock(cfg.StateDir)
	if err != nil {
		return err
	}
	defer release()
	var errs []error
	step := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", what, err))
			return
		}
		log.Info("removed", "what", what)
	}
	step("CNI conflist", removeFile(filepath.Join(cfg.CNIConfDir, nodelayout.CNIConfFile)))
	step("CNI plugin", removeFile(filepath.Join(cfg.CNIBinDir, "myelin-cni")))
	step("portmap plugin", removeFile(filepath.Join(cfg.CNIBinDir, PortmapPlugin)))
	step("pod host veths", deleteHostVeths())
	step("pod-to-node rule and table", tunnel.SyncPodToNode(nil, netip.Prefix{}, nil, 0, false))
	step("VXLAN device "+tunnel.DeviceName, tunnel.RemoveDevice())
	step("health address "+clusterhealth.AddressLabel, clusterhealth.RemoveAddress())
	step("node routes", routing.Kernel{}.SyncNodeRoutes(nil))
	step("iptables chain "+iptables.ForwardChain, iptables.RemoveForward())
	step("iptables chain "+iptables.MasqueradeChain, iptables.RemoveMasquerade())
	step("BPF pins in "+cfg.BPFFSDir, removeTree(cfg.BPFFSDir))
	step("state in "+cfg.StateDir, removeTree(cfg.StateDir))
	return errors.Join(errs...)
}

// cleanupLock takes the state directory's lock (lockStateDir) for Cleanup: an agent
// running on it would put back what Cleanup removes, and Cleanup would remove its
// lock file from under it. No state directory: no agent has started, nothing to guard
// (none is made).
func cleanupLock(dir string) (release func(), err error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	l, err := tryStateLock(dir, "cleanup: a myelin agent runs on state directory %s (%v); stop it first "+
		"(the chart's cleanup mode replaces the agents)")
	if err != nil {
		return nil, err
	}
	return func() { l.Release(false) }, nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removeTree removes dir and everything in it. A dir that is a mount point (the
// chart's hostPath /run/myelin) is emptied and stays.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// deleteHostVeths deletes every veth named like a pod's host side.
func deleteHostVeths() error {
	links, err := link.Dump("links", netlink.LinkList)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range links {
		if name := l.Attrs().Name; l.Type() == "veth" && strings.HasPrefix(name, hostVethPrefix) {
			errs = append(errs, link.DeleteByName(name))
		}
	}
	return errors.Join(errs...)
}
