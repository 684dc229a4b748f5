package config

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/myelin-net/myelin/internal/kube"
)

// The ConfigMap the agent reads its configuration from.
const (
	ConfigMapNamespace = "kube-system"
	ConfigMapName      = "myelin-config"
)

// NodeConfigResource is the NodeConfig custom resource (deploy/crds/myelin.io_nodeconfigs.yaml).
var NodeConfigResource = schema.GroupVersionResource{Group: "myelin.io", Version: "v1alpha1", Resource: "nodeconfigs"}

// MissingConfigMapSource is the source of defaulted keys when the ConfigMap does not exist.
var MissingConfigMapSource = fmt.Sprintf("%s (no ConfigMap %s/%s)", DefaultSourceName, ConfigMapNamespace, ConfigMapName)

// Load reads the myelin-config ConfigMap and the NodeConfigs of its namespace that
// select a node with nodeLabels, and resolves the node's configuration. NodeConfigs in
// other namespaces are not read: whoever may write one there (a tenant with a
// namespace's admin role) must not configure nodes. A ConfigMap that does not exist
// (NotFound) means built-in defaults, said in Config.ConfigMapMissing and as the source
// of every defaulted key; any other failure to read it (forbidden, unreachable) is an
// error, never a silent default. A missing NodeConfig CRD means no NodeConfigs.
func Load(ctx context.Context, cs kube.Client, dyn dynamic.Interface, nodeLabels map[string]string) (Config, error) {
	var sources []Source
	missing := false
	cm, err := cs.GetConfigMap(ctx, ConfigMapNamespace, ConfigMapName)
	switch {
	case apierrors.IsNotFound(err):
		missing = true
	case apierrors.IsForbidden(err):
		return Config{}, fmt.Errorf("read ConfigMap %s/%s: %w; grant the agent get on it (Role myelin-agent in %s)",
			ConfigMapNamespace, ConfigMapName, err, ConfigMapNamespace)
	case err != nil:
		return Config{}, fmt.Errorf("read ConfigMap %s/%s: %w", ConfigMapNamespace, ConfigMapName, err)
	default:
		sources = append(sources, Source{Name: fmt.Sprintf("ConfigMap %s/%s", ConfigMapNamespace, ConfigMapName), Values: cm.Data})
	}
	ncs, err := listNodeConfigs(ctx, dyn, ConfigMapNamespace)
	if err != nil {
		return Config{}, err
	}
	selected, err := SelectNodeConfigs(nodeLabels, ncs)
	if err != nil {
		return Config{}, err
	}
	c, err := Resolve(append(sources, selected...)...)
	if err != nil || !missing {
		return c, err
	}
	c.ConfigMapMissing = true
	for i := range c.Effective {
		if c.Effective[i].Source == DefaultSourceName {
			c.Effective[i].Source = MissingConfigMapSource
		}
	}
	return c, nil
}

// nodeConfigObject is the wire form of a NodeConfig.
type nodeConfigObject struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeSelector metav1.LabelSelector `json:"nodeSelector"`
		Defaults     map[string]string    `json:"defaults"`
	} `json:"spec"`
}

// listNodeConfigs lists the NodeConfigs of namespace.
func listNodeConfigs(ctx context.Context, dyn dynamic.Interface, namespace string) ([]NodeConfig, error) {
	list, err := dyn.Resource(NodeConfigResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // the CRD is not installed: no NodeConfigs
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("list NodeConfigs in %s: %w; grant the agent list on nodeconfigs (Role myelin-agent in %s)",
			namespace, err, namespace)
	case err != nil:
		return nil, fmt.Errorf("list NodeConfigs in %s: %w", namespace, err)
	}
	var out []NodeConfig
	for _, item := range list.Items {
		var obj nodeConfigObject
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &obj); err != nil {
			return nil, fmt.Errorf("NodeConfig %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
		out = append(out, NodeConfig{Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID,
			NodeSelector: obj.Spec.NodeSelector, Defaults: obj.Spec.Defaults})
	}
	return out, nil
}
