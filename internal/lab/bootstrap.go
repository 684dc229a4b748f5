package lab

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/k8s"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// AgentUser is the identity of myelin-agent in the lab (its client certificate's CN),
// bound to the myelin-agent ClusterRole and kube-system Role (rbac.go) as a
// DaemonSet's ServiceAccount would be.
const AgentUser = "myelin-agent"

// ProfileConfig returns the myelin-config ConfigMap data of a lab profile.
func ProfileConfig(p labplan.Plan) map[string]string {
	c := map[string]string{
		"cluster-cidr":             p.Addressing.ClusterCIDR.String(),
		"ipv4-native-routing-cidr": p.Addressing.ClusterCIDR.String(),
		"routing-mode":             "native",
		"auto-direct-node-routes":  "true",
		"host-routing":             "auto",
	}
	if p.Options.KubeProxy != "" {
		c["kube-proxy-replacement"] = "false"
	}
	switch p.Options.Profile {
	case "native-legacy":
		c["host-routing"] = "legacy"
	case "tunnel":
		c["routing-mode"], c["auto-direct-node-routes"] = "tunnel", "false"
	case "tunnel-legacy":
		c["routing-mode"], c["auto-direct-node-routes"], c["host-routing"] = "tunnel", "false", "legacy"
	}
	return c
}

// bootstrapCluster creates what the lab's nodes need from the API before they start:
// the agent's RBAC and, for --cni myelin, the myelin-config ConfigMap of the profile.
func bootstrapCluster(ctx context.Context, paths labplan.Paths, plan labplan.Plan) error {
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := createAgentRBAC(ctx, cs); err != nil {
		return err
	}
	if plan.Options.CNI != labplan.CNIMyelin {
		return nil
	}
	dyn, err := DynamicClient(paths.Kubeconfig())
	if err != nil {
		return err
	}
	if err := create(func() error { return k8s.EnsureCRDs(ctx, dyn) }); err != nil {
		return err
	}
	return applyProfile(ctx, cs, plan)
}

func applyProfile(ctx context.Context, cs kubernetes.Interface, plan labplan.Plan) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "myelin-config", Namespace: "kube-system",
			Labels: map[string]string{"myelin.io/lab-profile": plan.Options.Profile}},
		Data: ProfileConfig(plan),
	}
	err := create(func() error {
		_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create ConfigMap kube-system/myelin-config: %w", err)
	}
	return nil
}

// create runs a create call, treating AlreadyExists as done (the lab bootstraps once,
// but a restarted supervisor may run it again) and retrying while the apiserver's
// bootstrap (namespaces, RBAC) is still settling.
func create(f func() error) error {
	var err error
	for range 30 {
		err = f()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}
