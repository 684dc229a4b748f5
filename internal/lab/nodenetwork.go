package lab

import (
	"context"
	"log/slog"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// RunNodeNetwork runs the lab CNI flavour's node network (cni.Flavour.NodeNetwork) for
// node n until ctx ends, with the administrator's client, from the node's netns: the
// lab kubelet starts it beside its pods; on --runtime containerd the supervisor runs it
// as its own process (`myelin lab node-network`, NodeNetworkProcess).
func RunNodeNetwork(ctx context.Context, paths labplan.Paths, plan labplan.Plan, n labplan.Node, log *slog.Logger) error {
	admin, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	FlavourOf(plan.Options.CNI).NodeNetwork(ctx, cni.Node{
		Plan: plan, Paths: paths, Node: n, Admin: admin,
		Log: log.With("component", string(plan.Options.CNI)+"-network"),
	})
	return nil
}
