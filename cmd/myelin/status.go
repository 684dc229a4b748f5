package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/cli"
)

func statusCommand() *cobra.Command {
	var o cli.StatusOptions
	cmd := &cobra.Command{
		Use:   "status [--node NODE | --all] [--health] [-o json]",
		Short: "Show a node's networking: modes and fallback reasons, IPAM, endpoints, nodes, maps, errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Status(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	agentFlags(cmd, &o.Node, &o.Output, &o.Socket, "node to ask (a lab node name; default: this node's agent, or the only lab node)")
	cmd.Flags().BoolVar(&o.All, "all", false, "every node this machine can reach (every lab node)")
	cmd.Flags().BoolVar(&o.Health, "health", false, "also print the node health matrix (as myelin health does; text output)")
	return cmd
}

func healthCommand() *cobra.Command {
	var o cli.HealthOptions
	cmd := &cobra.Command{
		Use:   "health [--node NODE | --all] [-o json]",
		Short: "Show which other nodes a node reaches, over the node network (ICMP, HTTP) and the pod network (HTTP), with latencies and the last failure",
		Long: `Every agent probes every other node: an ICMP echo and an HTTP request to the node IP,
and an HTTP request to the node's health address (the first address of its PodCIDR)
through the pod network, from its own health address. The round over all peers takes
max(10s, peers x 100ms) (±10% jitter), so an agent starts at most 10 peers' probes a
second however large the cluster. This prints one row a peer: whether it is reachable
via the node network (ICMP and HTTP both ok) and via the pod network, the latency of
the last successful probe of each, since when the peer is in its state, and the last
failure (when, which path, why; kept after the peer recovered). docs/health.md has
the details; the key cluster-health-port (default 4240, 0: off) sets the port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Health(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	agentFlags(cmd, &o.Node, &o.Output, &o.Socket, "node to ask (a lab node name; default: this node's agent, or the only lab node)")
	cmd.Flags().BoolVar(&o.All, "all", false, "every node this machine can reach (every lab node)")
	return cmd
}

func monitorCommand() *cobra.Command {
	var o cli.MonitorOptions
	cmd := &cobra.Command{
		Use:   "monitor [--node NODE] [--type drop|trace]",
		Short: "Stream datapath events (drops with their reasons, traces) with pod names, and lost-event counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Monitor(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	agentFlags(cmd, &o.Node, &o.Output, &o.Socket, "node to watch (a lab node name)")
	cmd.Flags().StringVar(&o.Type, "type", "", "drop or trace (default: both)")
	return cmd
}

func configCommand() *cobra.Command {
	var o cli.ConfigOptions
	cmd := &cobra.Command{
		Use:   "config [--node NODE] [-o json]",
		Short: "Show a node's effective configuration: every key, its value and where it came from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Config(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	agentFlags(cmd, &o.Node, &o.Output, &o.Socket, "node to ask (a lab node name)")
	return cmd
}

func servicesCommand() *cobra.Command {
	var o cli.ServicesOptions
	cmd := &cobra.Command{
		Use:   "services [--node NODE] [-o json]",
		Short: "List the Service frontends (ClusterIP, NodePort) programmed in a node's datapath, with their backends",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Services(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	agentFlags(cmd, &o.Node, &o.Output, &o.Socket, "node to ask (a lab node name)")
	return cmd
}

// agentFlags adds the flags of every command that asks an agent: which node
// (nodeHelp), the output format and the agent socket.
func agentFlags(cmd *cobra.Command, node, output, socket *string, nodeHelp string) {
	cmd.Flags().StringVar(node, "node", "", nodeHelp)
	cmd.Flags().StringVarP(output, "output", "o", "text", "text or json")
	cmd.Flags().StringVar(socket, "socket", "", "agent socket (overrides --node)")
}
