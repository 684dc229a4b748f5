package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/cli"
)

func endpointsCommand() *cobra.Command {
	var o cli.PolicyOptions
	cmd := &cobra.Command{
		Use:   "endpoints [--node NODE | --all] [-o json]",
		Short: "List a node's pods with their NetworkPolicy identity and enforcement (ingress/egress on or off)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Endpoints(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().StringVar(&o.Node, "node", "", "node to ask (a lab node name)")
	cmd.Flags().BoolVar(&o.All, "all", false, "every agent on this machine")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "text", "text or json")
	cmd.Flags().StringVar(&o.Socket, "socket", "", "agent socket (overrides --node)")
	return cmd
}

func policyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "NetworkPolicy: ask what the agents enforce"}
	var o cli.PolicyOptions
	trace := &cobra.Command{
		Use:   "trace --from NS/POD --to NS/POD --port 80/TCP [--node NODE]",
		Short: "Would a new connection from one pod to another be allowed, and by which policy (the agent's computed state)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.PolicyTrace(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	trace.Flags().StringVar(&o.From, "from", "", "client pod, namespace/name")
	trace.Flags().StringVar(&o.To, "to", "", "server pod, namespace/name")
	trace.Flags().StringVar(&o.Port, "port", "", "PORT/PROTOCOL (TCP, UDP or SCTP), e.g. 80/TCP")
	trace.Flags().StringVar(&o.Node, "node", "", "node to ask (a lab node name; any node answers for any two pods)")
	trace.Flags().StringVarP(&o.Output, "output", "o", "text", "text or json")
	trace.Flags().StringVar(&o.Socket, "socket", "", "agent socket (overrides --node)")
	cmd.AddCommand(trace)
	return cmd
}
