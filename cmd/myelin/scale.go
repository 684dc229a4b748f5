package main

import (
	"github.com/spf13/cobra"

	"github.com/myelin-net/myelin/internal/bench"
	"github.com/myelin-net/myelin/internal/kwok"
)

func scaleCommand() *cobra.Command {
	o := bench.KwokScaleOptions{Shape: kwok.Shape{Nodes: 1000, Pods: 50000, Services: 10000}, Churn: 1000, OutDir: "scale-results"}
	cmd := &cobra.Command{
		Use:   "scale [--kwok-nodes N] [--pods P] [--services S] [--churn C] [--out DIR]",
		Short: "Measure one real agent in a simulated cluster of a thousand nodes (kwok)",
		Long: `scale brings up a 1-node lab, runs kwok (` + kwok.Version + `, built by make setup) against its
apiserver and creates N simulated Nodes, P pods spread over them (kwok runs them with
an IP from their Node's PodCIDR) and S ClusterIP Services selecting them (the
controller-manager writes their EndpointSlices). Then it measures the real agent of
the lab's node: a restart until it has programmed every Service and backend (time,
CPU, RSS), C pods replaced (deleted and created again: 2C events) until it is idle
again (CPU, peak RSS), and its writes to the apiserver throughout (counted by API
Priority and Fairness FlowSchemas matching the agent's user). It writes
kwok-scale.json, kwok.log and sample-pod.json into --out and brings the lab down. Run as root;
docs/scale.md explains the figures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := bench.RunKwokScale(cmd.Context(), cmd.OutOrStdout(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Shape.Nodes, "kwok-nodes", o.Shape.Nodes, "simulated nodes")
	f.IntVar(&o.Shape.Pods, "pods", o.Shape.Pods, "simulated pods (round-robin over the nodes)")
	f.IntVar(&o.Shape.Services, "services", o.Shape.Services, "ClusterIP Services (pod i is in Service i mod S)")
	f.IntVar(&o.Churn, "churn", o.Churn, "pods to replace for the churn figure (0: none)")
	f.StringVar(&o.OutDir, "out", o.OutDir, "directory for kwok-scale.json, kwok.log and sample-pod.json")
	return cmd
}
