package lab

import (
	"context"
	"time"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// bootstrapCluster creates what the lab's nodes need from the API (and etcd) before
// they start: whatever the CNI flavour needs (for --cni myelin the agent's RBAC, the
// CRDs and the myelin-config ConfigMap of the profile; for flannel its network
// configuration in etcd).
func bootstrapCluster(ctx context.Context, paths labplan.Paths, plan labplan.Plan) error {
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	dyn, err := DynamicClient(paths.Kubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return FlavourOf(plan.Options.CNI).Bootstrap(ctx, cni.Cluster{Plan: plan, Paths: paths, Kube: cs, Dynamic: dyn})
}
