package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/cli"
)

func statusCommand() *cobra.Command {
	var o cli.StatusOptions
	cmd := &cobra.Command{
		Use:   "status [--node NODE | --all] [-o json]",
		Short: "Show a node's networking: modes and fallback reasons, IPAM, endpoints, nodes, maps, errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Status(cmd.Context(), cmd.OutOrStdout(), o)
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
