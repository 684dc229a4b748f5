// Command myelin-agent runs on every node: it owns the node's datapath (BPF programs
// and maps, routes, IPAM, endpoints) and serves the local API. Its control loop is
// internal/agent.Run; this file only parses the bootstrap flags.
package main

import (
	"context"
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
	flag.StringVar(&cfg.Uplink, "uplink", "eth0", "the node's uplink device")
	flag.Parse()
	if cfg.Node == "" {
		fmt.Fprintln(os.Stderr, "myelin-agent: --node is required (or set NODE_NAME)")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", cfg.Node)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, cfg, log); err != nil {
		log.Error("myelin-agent stopped", "err", err)
		fmt.Fprintf(os.Stderr, "myelin-agent: %v\n", err)
		os.Exit(1)
	}
}
