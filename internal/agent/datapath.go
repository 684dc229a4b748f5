package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/myelin-net/myelin/internal/clusterhealth"
	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/endpoint"
	"github.com/myelin-net/myelin/internal/flowstore"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/iptables"
	"github.com/myelin-net/myelin/internal/lockfile"
	"github.com/myelin-net/myelin/internal/routing"
	"github.com/myelin-net/myelin/internal/statefile"
	"github.com/myelin-net/myelin/internal/tunnel"
)

// nodeDatapath is what start-up leaves running on the node: the loaded and attached
// BPF datapath, the IPAM pool, the restored endpoints, the overlay device in tunnel
// mode, and the masquerade loop that wrote its first set before the egress program
// was attached.
type nodeDatapath struct {
	dp      *datapath.Datapath
	pool    *ipam.Pool
	eps     *endpoint.Manager
	overlay netlink.Link // myelin_vxlan in tunnel mode, nil otherwise
	masq    *masqueradeLoop
	// socketLB is what status shows of bpf-lb-sock (socklb.go).
	socketLB socketLBView
	// flows is the node's flow store (flow.Source; AddSink for flow metrics): never
	// nil once Run has called startFlows, empty while enable-hubble is off.
	flows *flowstore.Store
}

// ownStateDir makes the agent's state directory and keeps it root's alone (0700): its
// file names are container ids, its records pods' addresses and identities. The
// chart's hostPath and an older agent made it 0755, so an existing directory is
// tightened too; a symlink is refused, since the agent empties the directory on
// cleanup and would follow it.
func ownStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory (--state-dir): %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state directory (--state-dir): %w", err)
	}
	if !fi.IsDir() {
		what := "not a directory"
		if fi.Mode()&os.ModeSymlink != 0 {
			what = "a symlink"
		}
		return fmt.Errorf("state directory %s (--state-dir) is %s; remove it or point --state-dir at a directory of its own", dir, what)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory %s (--state-dir): make it 0700: %w", dir, err)
		}
	}
	return nil
}

// stateLock is the state directory's lock file (lockStateDir).
const stateLock = "agent.lock"

// lockStateDir makes the state directory (ownStateDir) and takes its lock for the
// agent's life (the kernel drops it with the process, also a killed one): two agents
// on one state directory would each read ipam.json and overwrite the other's
// allocations (one address for two pods) and take each other's API socket. Nothing
// else excluded that once health-port is 0 (the binary's default).
func lockStateDir(dir string) (*lockfile.Lock, error) {
	if err := ownStateDir(dir); err != nil {
		return nil, err
	}
	return tryStateLock(dir, "state directory %s (--state-dir) is another running myelin agent's (%v); "+
		"stop that agent first, or give each agent its own --state-dir")
}

// tryStateLock takes dir's lock (stateLock) without waiting; while an agent holds it
// the error is refusal, a format of dir and the holder.
func tryStateLock(dir, refusal string) (*lockfile.Lock, error) {
	l, err := lockfile.TryLock(filepath.Join(dir, stateLock))
	if errors.Is(err, lockfile.ErrHeld) {
		return nil, fmt.Errorf(refusal, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("state directory %s (--state-dir): %w", dir, err)
	}
	return l, nil
}

// startDatapath opens IPAM, loads and attaches BPF, sets up or removes legacy
// forwarding as the plan says, and adopts existing endpoints.
func (s *startup) startDatapath(ctx context.Context, nodes *nodeWatch) (*nodeDatapath, error) {
	// Run made the state directory and holds its lock (lockStateDir): only this
	// agent writes files there (ipam.json, the policy files), none before
	// this: a temporary file is what a crash mid-write left.
	if err := statefile.RemoveTemporary(s.cfg.StateDir); err != nil {
		s.log.Warn("remove temporary files a crash left in the state directory", "err", err)
	}
	if err := ensureBPFFS(s.cfg.BPFFSDir, s.cfg.MountBPFFS); err != nil {
		return nil, err
	}
	pool, err := ipam.OpenPool(filepath.Join(s.cfg.StateDir, "ipam.json"), s.podCIDR)
	if err != nil {
		return nil, err
	}
	// Going to legacy, the stack must accept forwarded pod traffic before the programs
	// start handing packets to it; going to BPF, the rules go only after every program
	// has been replaced. Either way no packet meets a half-switched node.
	if !s.plan.HostRouting.BPF {
		if err := iptables.EnsureForward(s.plan.ClusterCIDR); err != nil {
			return nil, err
		}
	}
	dp, overlay, err := s.loadDatapath()
	if err != nil {
		return nil, err
	}
	n := &nodeDatapath{dp: dp, pool: pool, overlay: overlay}
	n.masq = newMasqueradeLoop(s.plan, dp, nodes, s.loops, s.log)
	// The no-masquerade set must be complete before the egress program runs, or
	// traffic between pods and nodes would be translated.
	if err := n.masq.first(ctx, s.cs); err != nil {
		dp.Close()
		return nil, err
	}
	if err := attach(dp, s.uplink, overlay); err != nil {
		dp.Close()
		return nil, err
	}
	// An earlier start's links on a renamed or replaced uplink, or on myelin_vxlan
	// before a switch to native routing, would otherwise stay pinned for good.
	if err := dp.DetachStaleDeviceLinks(s.uplink.Attrs().Name, overlay != nil); err != nil {
		s.log.Warn("detach the pinned links of devices this start does not attach", "err", err)
	}
	s.plan.BIGTCP = s.setBIGTCP(overlay) // bigtcp.go; before pods are adopted or added
	n.eps = s.restoreEndpoints(dp, pool)
	n.socketLB = startSocketLB(s.plan, dp, s.log)
	if s.plan.HostRouting.BPF {
		if err := iptables.RemoveForward(); err != nil {
			dp.Close()
			return nil, err
		}
	}
	return n, nil
}

// errBPFLoad marks a failed BPF load (counted in myelin_bpf_load_errors_total).
var errBPFLoad = errors.New("load the BPF datapath")

// loadDatapath creates (tunnel mode) or removes myelin_vxlan and loads the BPF
// objects as the plan says, reusing pinned maps.
func (s *startup) loadDatapath() (*datapath.Datapath, netlink.Link, error) {
	dpCfg := s.plan.datapathConfig(s.cfg.BPFFSDir)
	dpCfg.HealthIP = clusterhealth.HealthAddr(s.podCIDR)
	if !s.plan.SourceValidation {
		s.log.Warn("source IP verification is OFF: pods can send from any address and MAC, other pods', nodes' and Services' included; "+
			"turn it off only to measure its cost", "key", "enable-source-ip-verification", "source", s.conf.Source("enable-source-ip-verification"))
	}
	var overlay netlink.Link
	if s.plan.Tunnel {
		dev, err := tunnel.EnsureDevice(int(s.plan.TunnelPort), s.plan.MTU, datapath.OverlayMAC(s.plan.NodeIP))
		if err != nil {
			return nil, nil, err
		}
		overlay, dpCfg.Tunnel, dpCfg.OverlayIfIndex = dev, true, dev.Attrs().Index
		dpCfg.OverlayMAC = datapath.OverlayMAC(s.plan.NodeIP)
		dpCfg.OverlayPort = s.plan.TunnelPort
	} else if err := tunnel.RemoveDevice(); err != nil {
		return nil, nil, fmt.Errorf("remove %s (native routing needs none): %w", tunnel.DeviceName, err)
	}
	start := time.Now()
	dp, err := datapath.Load(dpCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errBPFLoad, err)
	}
	// Most of an agent's start (docs/scale.md, "Services after a restart").
	s.log.Info("datapath loaded", "took", time.Since(start).Round(time.Millisecond))
	for _, r := range dp.ReplacedMaps() {
		if !r.Carrying() && r.ConvertErr == "" {
			s.log.Info("pinned BPF map replaced: a kind of map whose entries are not carried (counters, rings, maps of maps); it starts empty",
				"map", r.Name, "change", r.Reason)
			continue
		}
		if !r.Carrying() {
			s.log.Warn("pinned BPF map replaced: its layout or type changed (an upgrade) and its entries could not be converted; it starts empty until the agent has synced it",
				"map", r.Name, "change", r.Reason, "why", r.ConvertErr)
			continue
		}
		level := slog.LevelInfo
		if r.Lost > 0 || r.CarryErr != "" {
			level = slog.LevelWarn
		}
		msg := "pinned BPF map replaced: its size changed (a table size in the configuration, or an upgrade); its entries were carried over"
		if r.Converted() {
			msg = "pinned BPF map replaced: its layout changed (an upgrade); its entries were converted into the new layout by field name"
		}
		s.log.Log(context.Background(), level, msg,
			"map", r.Name, "change", r.Reason, "carried", r.Carried, "lost", r.Lost, "err", r.CarryErr)
	}
	return dp, overlay, nil
}

// attach puts myelin_from_netdev and myelin_to_netdev on the uplink and, in tunnel
// mode, myelin_from_overlay and myelin_to_overlay on myelin_vxlan, which it then
// brings up.
func attach(dp *datapath.Datapath, uplink, overlay netlink.Link) error {
	if err := dp.AttachNetdev(uplink.Attrs().Index, uplink.Attrs().Name); err != nil {
		return fmt.Errorf("attach to uplink %s: %w", uplink.Attrs().Name, err)
	}
	if err := dp.AttachToNetdev(uplink.Attrs().Index, uplink.Attrs().Name); err != nil {
		return fmt.Errorf("attach to uplink %s egress: %w", uplink.Attrs().Name, err)
	}
	if overlay != nil {
		if err := dp.AttachOverlay(overlay.Attrs().Index, tunnel.DeviceName); err != nil {
			return fmt.Errorf("attach to %s: %w", tunnel.DeviceName, err)
		}
		// Only now: the device decapsulates as soon as it is up.
		return tunnel.Up(overlay)
	}
	return nil
}

// restoreEndpoints adopts the endpoints recorded on disk (map entries, programs,
// routes); those whose veth vanished are removed. A failure, and a damaged IPAM
// file (ipam.Pool.Damaged), is reported, not fatal.
func (s *startup) restoreEndpoints(dp *datapath.Datapath, pool *ipam.Pool) *endpoint.Manager {
	eps := endpoint.NewManager(endpoint.Config{Dir: filepath.Join(s.cfg.StateDir, "endpoints"), Node: s.cfg.Node,
		MTU: s.plan.MTU, RouteMTU: s.plan.RouteMTU, GSOIPv4MaxSize: s.plan.BIGTCP.Size}, dp, routing.Kernel{}, pool)
	adopted, removed, err := eps.Restore()
	if damaged := pool.Damaged(); damaged != nil { // ipam.json was damaged: the records gave the addresses back
		// The error says what was left out and what stands in for it.
		s.log.Error("IPAM state damaged", "err", damaged)
		err = errors.Join(damaged, err)
	}
	s.loops.report("endpoint-restore", err)
	s.log.Info("endpoints restored", "adopted", adopted, "removed", removed, "err", err)
	return eps
}
