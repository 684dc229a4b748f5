package labdriver

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/config"
	"github.com/myelin-net/myelin/internal/lab"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// pollEvery is how often the waits below look again.
const pollEvery = 250 * time.Millisecond

// Driver talks to one running lab.
type Driver struct {
	Paths labplan.Paths
	Kube  kubernetes.Interface
	Dyn   dynamic.Interface
}

// New connects to the lab whose files are at paths, as its administrator.
func New(paths labplan.Paths) (*Driver, error) {
	cs, err := lab.Client(paths.Kubeconfig())
	if err != nil {
		return nil, err
	}
	dyn, err := lab.DynamicClient(paths.Kubeconfig())
	if err != nil {
		return nil, err
	}
	return &Driver{Paths: paths, Kube: cs, Dyn: dyn}, nil
}

// HostnameSelector selects the nodes named.
func HostnameSelector(nodes ...string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: nodes}}}
}

// CreateNodeConfig creates the NodeConfig namespace/name giving the nodes that selector
// selects the configuration defaults.
func (d *Driver) CreateNodeConfig(ctx context.Context, namespace, name string, selector metav1.LabelSelector, defaults map[string]string) error {
	sel, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&selector)
	if err != nil {
		return fmt.Errorf("NodeConfig %s: node selector: %w", name, err)
	}
	defs := map[string]any{}
	for key, v := range defaults {
		defs[key] = v
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": config.NodeConfigResource.GroupVersion().String(), "kind": "NodeConfig",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"nodeSelector": sel, "defaults": defs},
	}}
	if _, err := d.Dyn.Resource(config.NodeConfigResource).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create NodeConfig %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DeleteNodeConfig deletes the NodeConfig namespace/name.
func (d *Driver) DeleteNodeConfig(ctx context.Context, namespace, name string) error {
	if err := d.Dyn.Resource(config.NodeConfigResource).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete NodeConfig %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ProcessPID returns the pid of the supervised process name ("agent-<node>",
// "kube-apiserver", ...) of the lab at paths, 0 when it is not running.
func ProcessPID(paths labplan.Paths, name string) (int, error) {
	st, err := lab.LoadState(paths)
	if err != nil {
		return 0, err
	}
	for _, p := range st.Processes {
		if p.Name == name && p.Running {
			return p.PID, nil
		}
	}
	return 0, nil
}

// AgentStatus asks the agent of a lab node for its status.
func AgentStatus(ctx context.Context, node string) (api.Status, error) {
	st, err := api.NewClient(api.NodeSocket(node)).Status(ctx)
	if err != nil {
		return api.Status{}, fmt.Errorf("status of the agent of %s: %w", node, err)
	}
	return st, nil
}

// WaitAgentReady waits until the agent of a lab node reports ready, or ctx ends.
func WaitAgentReady(ctx context.Context, node string) error {
	for {
		h, err := api.NewClient(api.NodeSocket(node)).Health(ctx)
		if err == nil && h.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent of %s not ready (last answer: %v): %w", node, err, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}
