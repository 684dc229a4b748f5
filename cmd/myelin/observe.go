package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/cli"
)

func observeCommand() *cobra.Command {
	var o cli.ObserveOptions
	cmd := &cobra.Command{
		Use:   "observe [filters] [--last N] [--follow] [-o table|json]",
		Short: "Show flows (connections, drops with reasons, DNS) of every node, merged by time, with pods and Services",
		Long: `Show the flows the agents keep (docs/observability.md): by default the newest 20 of every
node this machine reaches (every lab node), merged by time; --follow keeps printing new ones.
Filters of one kind are ORed, different kinds ANDed. Pods are [namespace/]name (a name
prefix), in the --namespace given or in default.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Stderr = cmd.ErrOrStderr()
			return cli.Observe(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Pods, "pod", nil, "flows from or to this pod ([namespace/]name)")
	f.StringSliceVar(&o.FromPods, "from-pod", nil, "flows from this pod")
	f.StringSliceVar(&o.ToPods, "to-pod", nil, "flows to this pod")
	f.StringSliceVarP(&o.Namespaces, "namespace", "n", nil, "flows from or to pods of this namespace (and the namespace of bare pod names)")
	f.StringSliceVar(&o.Verdicts, "verdict", nil, "FORWARDED, DROPPED or TRACED")
	f.StringSliceVar(&o.Protocols, "protocol", nil, "tcp, udp, icmp, sctp or a protocol number")
	f.StringSliceVar(&o.ToServices, "to-service", nil, "flows addressed to this Service ([namespace/]name)")
	f.StringSliceVarP(&o.Types, "type", "t", nil, "l3_l4, drop, policy_verdict, trace or dns")
	f.StringSliceVar(&o.Ports, "port", nil, "source or destination port")
	f.StringSliceVar(&o.Nodes, "node", nil, "flows observed on this node")
	f.IntVar(&o.Last, "last", 0, "the newest N stored flows (default 20 without --follow)")
	f.BoolVarP(&o.Follow, "follow", "f", false, "keep printing new flows")
	f.StringVarP(&o.Output, "output", "o", "table", "table or json (one flow per line)")
	f.StringVar(&o.Socket, "socket", "", "one agent's API socket (default: every agent on this machine)")
	return cmd
}
