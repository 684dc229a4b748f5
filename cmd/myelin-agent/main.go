// Command myelin-agent runs on every node: it owns the node's datapath (BPF programs
// and maps, routes, IPAM, endpoints) and serves the local API. Its control loop is
// internal/agent.Run; this file only parses the bootstrap flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/myelin-net/myelin/internal/agent"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

func main() {
	cfg := agent.Config{}
	self, _ := os.Executable()
	flag.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	flag.StringVar(&cfg.StateDir, "state-dir", nodelayout.StateDir, "directory for endpoint records, IPAM state and the API socket")
	flag.StringVar(&cfg.BPFFSDir, "bpffs-dir", nodelayout.BPFFSDir, "bpffs directory for pinned maps and program links")
	flag.StringVar(&cfg.CNIBinDir, "cni-bin-dir", nodelayout.CNIBinDir, "where to install the myelin-cni plugin")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", nodelayout.CNIConfDir, "where to install the CNI network configuration")
	flag.StringVar(&cfg.CNIPluginSource, "cni-plugin", filepath.Join(filepath.Dir(self), "myelin-cni"), "the myelin-cni binary to install")
	flag.StringVar(&cfg.PortmapSource, "portmap-plugin", "", "the upstream portmap CNI plugin to install as "+agent.PortmapPlugin+" and chain after myelin-cni, for pods' hostPorts (\"\": no hostPort support; the chart's image has /usr/bin/myelin-portmap)")
	flag.StringVar(&cfg.CNIVersion, "cni-version", "1.0.0", "cniVersion of the conflist (1.0.0 works with containerd 1.6; 1.1.0 adds STATUS and GC)")
	flag.StringVar(&cfg.Uplink, "uplink", "eth0", "the node's uplink device")
	flag.IntVar(&cfg.HealthPort, "health-port", 0, "serve /healthz (liveness) and /readyz (readiness) on 127.0.0.1:PORT (0: off)")
	flag.StringVar(&cfg.CgroupRoot, "cgroup-root", "", "cgroup v2 directory socket-LB (bpf-lb-sock) attaches to, over the cgroup-root key (the lab sets each node's own)")
	flag.BoolVar(&cfg.MountBPFFS, "mount-bpffs", true, "mount a bpffs at the parent of --bpffs-dir when none is there; false in a pod (the chart), where a mount would not reach the node and a missing bpffs stops the agent with what to do")
	logFormat := flag.String("log-format", "text", "log format on stdout: text or json")
	installPlugin := flag.Bool("install-cni-plugin", false, "only copy --cni-plugin (and --portmap-plugin) into --cni-bin-dir and exit (the chart's init container)")
	cleanup := flag.Bool("cleanup", false, "remove everything myelin put on this node (conflist, plugins, pod veths, VXLAN device, health address, routes, iptables chains, pins, state) and exit; for uninstalling")
	hold := flag.Bool("hold", false, "with --cleanup: then wait for SIGTERM instead of exiting (the chart's cleanup DaemonSet)")
	doneFile := flag.String("cleanup-done-file", "", "with --cleanup: write this file once the node is clean (the chart's cleanup pods turn ready on it)")
	flag.Parse()
	if *cleanup {
		os.Exit(runCleanup(cfg, *logFormat, *hold, *doneFile))
	}
	if *installPlugin {
		if err := agent.InstallPlugin(cfg); err != nil {
			fmt.Fprintf(os.Stderr, "myelin-agent: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if cfg.Node == "" {
		fmt.Fprintln(os.Stderr, "myelin-agent: --node is required (or set NODE_NAME)")
		os.Exit(2)
	}
	log, err := newLogger(*logFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "myelin-agent: %v\n", err)
		os.Exit(2)
	}
	log = log.With("node", cfg.Node)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = agent.Run(ctx, cfg, log)
	switch {
	case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)):
		// SIGTERM (a rolling update, a drain): pins, links and the conflist stay, so
		// the datapath keeps forwarding until the next agent adopts it.
		log.Info("myelin-agent stopped on signal; the datapath keeps running")
	case err != nil:
		log.Error("myelin-agent stopped", "err", err)
		fmt.Fprintf(os.Stderr, "myelin-agent: %v\n", err)
		os.Exit(1)
	}
}

// runCleanup removes myelin from this node and returns the exit code.
func runCleanup(cfg agent.Config, logFormat string, hold bool, doneFile string) int {
	log, err := newLogger(logFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "myelin-agent: %v\n", err)
		return 2
	}
	if err := agent.Cleanup(cfg, log); err != nil {
		log.Error("cleanup incomplete", "err", err)
		return 1
	}
	log.Info("myelin removed from this node")
	if doneFile != "" {
		if err := writeDone(doneFile); err != nil {
			log.Error("cleanup done, but not said", "err", err)
			return 1
		}
	}
	if hold {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
	}
	return 0
}

// writeDone writes the file whose existence says the node is clean: the readiness
// probe of the chart's cleanup pods tests it, so kubectl rollout status returns only
// once every node is clean.
func writeDone(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write --cleanup-done-file %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte("myelin removed from this node\n"), 0o644); err != nil {
		return fmt.Errorf("write --cleanup-done-file %s: %w", path, err)
	}
	return nil
}

// newLogger writes structured lines to stdout, which the container runtime collects
// as the pod's log: json (one object per line) or text (key=value).
func newLogger(format string) (*slog.Logger, error) {
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stdout, nil)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stdout, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use json or text", format)
}
