package config

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap the agent reads its configuration from.
const (
	ConfigMapNamespace = "kube-system"
	ConfigMapName      = "myelin-config"
)

var nodeConfigResource = schema.GroupVersionResource{Group: "myelin.io", Version: "v1alpha1", Resource: "nodeconfigs"}

// Load reads the myelin-config ConfigMap and the NodeConfigs that select a node with
// nodeLabels, and resolves the node's configuration. A missing ConfigMap or NodeConfig
// CRD means none; an unreachable apiserver is an error.
func Load(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, nodeLabels map[string]string) (Config, error) {
	var sources []Source
	cm, err := cs.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Config{}, fmt.Errorf("read ConfigMap %s/%s: %w", ConfigMapNamespace, ConfigMapName, err)
	default:
		sources = append(sources, Source{Name: fmt.Sprintf("ConfigMap %s/%s", ConfigMapNamespace, ConfigMapName), Values: cm.Data})
	}
	ncs, err := listNodeConfigs(ctx, dyn)
	if err != nil {
		return Config{}, err
	}
	selected, err := SelectNodeConfigs(nodeLabels, ncs)
	if err != nil {
		return Config{}, err
	}
	return Resolve(append(sources, selected...)...)
}

// nodeConfigObject is the wire form of a NodeConfig.
type nodeConfigObject struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeSelector metav1.LabelSelector `json:"nodeSelector"`
		Defaults     map[string]string    `json:"defaults"`
	} `json:"spec"`
}

func listNodeConfigs(ctx context.Context, dyn dynamic.Interface) ([]NodeConfig, error) {
	list, err := dyn.Resource(nodeConfigResource).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil // the CRD is not installed: no NodeConfigs
	}
	if err != nil {
		return nil, fmt.Errorf("list NodeConfigs: %w", err)
	}
	var out []NodeConfig
	for _, item := range list.Items {
		var obj nodeConfigObject
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &obj); err != nil {
			return nil, fmt.Errorf("NodeConfig %s/%s: %w", item.GetNamespace(), item.GetName(), err)
		}
		out = append(out, NodeConfig{Namespace: obj.Namespace, Name: obj.Name,
			NodeSelector: obj.Spec.NodeSelector, Defaults: obj.Spec.Defaults})
	}
	return out, nil
}
