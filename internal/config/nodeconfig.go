package config

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// NodeConfig is a myelin.io/v1alpha1 NodeConfig: configuration keys for the nodes its
// selector matches.
type NodeConfig struct {
	Namespace    string
	Name         string
	UID          types.UID
	NodeSelector metav1.LabelSelector
	Defaults     map[string]string
}

// SourceName is how the NodeConfig is named in Effective and in errors.
func (n NodeConfig) SourceName() string { return fmt.Sprintf("NodeConfig %s/%s", n.Namespace, n.Name) }

// SelectNodeConfigs returns, as sources in the order they apply (by name, then
// namespace), the NodeConfigs whose selector matches the node's labels. An empty
// selector matches every node; an invalid one is an error naming the NodeConfig.
func SelectNodeConfigs(nodeLabels map[string]string, all []NodeConfig) ([]Source, error) {
	sorted := append([]NodeConfig(nil), all...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Name != sorted[j].Name {
			return sorted[i].Name < sorted[j].Name
		}
		return sorted[i].Namespace < sorted[j].Namespace
	})
	var out []Source
	for _, nc := range sorted {
		sel, err := metav1.LabelSelectorAsSelector(&nc.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("%s: bad spec.nodeSelector: %w", nc.SourceName(), err)
		}
		if sel.Matches(labels.Set(nodeLabels)) {
			out = append(out, Source{Name: nc.SourceName(), Values: nc.Defaults, PerNode: true, UID: nc.UID})
		}
	}
	return out, nil
}
