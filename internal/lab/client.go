package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client returns a Kubernetes client for the kubeconfig at path.
func Client(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent, cfg.Dial = "myelin-lab", Dial
	return kubernetes.NewForConfig(cfg)
}

// DynamicClient returns a dynamic client (for custom resources) for the kubeconfig at path.
func DynamicClient(path string) (dynamic.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent, cfg.Dial = "myelin-lab", Dial
	return dynamic.NewForConfig(cfg)
}

// waitNodesReady waits until every planned node is registered, Ready and has a PodCIDR,
// and the default ServiceAccount exists (so Pods can be created right away).
func waitNodesReady(ctx context.Context, paths labplan.Paths, plan labplan.Plan, timeout time.Duration) error {
	cs, err := Client(paths.Kubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var missing []string
	for {
		missing = missing[:0]
		for _, n := range plan.Nodes {
			// --cni none: nodes stay NotReady until a CNI is installed; wait for registration.
			if why := nodeNotReady(ctx, cs, n.Name, plan.Options.CNI != labplan.CNINone); why != "" {
				missing = append(missing, fmt.Sprintf("%s %s (log: %s)", n.Name, why, paths.Log("kubelet-"+n.Name)))
			}
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			missing = append(missing, "service account default/default not created yet (log: "+paths.Log("kube-controller-manager")+")")
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab not ready within %v: %s", timeout, strings.Join(missing, "; "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// nodeNotReady says what a node still lacks, or "" when it is ready for Pods (or,
// without needReady, registered with a PodCIDR).
func nodeNotReady(ctx context.Context, cs kubernetes.Interface, name string, needReady bool) string {
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "is not registered"
	}
	if node.Spec.PodCIDR == "" {
		return "has no PodCIDR yet"
	}
	if !needReady {
		return ""
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	return "is not Ready"
}
