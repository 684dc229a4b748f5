package myelin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// ProfileConfig returns the myelin-config ConfigMap data of a lab profile.
func ProfileConfig(p labplan.Plan) map[string]string {
	c := map[string]string{
		"cluster-cidr":             p.Addressing.ClusterCIDR.String(),
		"ipv4-native-routing-cidr": p.Addressing.ClusterCIDR.String(),
		"routing-mode":             "native",
		"auto-direct-node-routes":  "true",
		"host-routing":             "auto",
		// The lab's devices are veths and its underlay ports take 192 KiB (lab
		// underlay.go): BIG TCP moves bulk data with less CPU here (docs/bench/2026-11-23/bigtcp).
		// In tunnel mode the VXLAN device can't, and status says so.
		"enable-ipv4-big-tcp": "true",
		// The lab's relay reads every agent's flows there (Processes); the agent's
		// default opens no port.
		"hubble-listen-address": ":4244",
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

func applyProfile(ctx context.Context, cs kubernetes.Interface, plan labplan.Plan) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "myelin-config", Namespace: "kube-system",
			Labels: map[string]string{"myelin.io/lab-profile": plan.Options.Profile}},
		Data: ProfileConfig(plan),
	}
	err := cni.Create(func() error {
		_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("create ConfigMap kube-system/myelin-config: %w", err)
	}
	return nil
}
