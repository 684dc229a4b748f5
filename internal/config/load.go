package config

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap the agent reads its configuration from.
const (
	ConfigMapNamespace = "kube-system"
	ConfigMapName      = "myelin-config"
)

// Load reads the myelin-config ConfigMap and resolves the configuration. A missing
// ConfigMap means built-in defaults; an unreachable apiserver is an error.
func Load(ctx context.Context, cs kubernetes.Interface) (Config, error) {
	var sources []Source
	cm, err := cs.CoreV1().ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Config{}, fmt.Errorf("read ConfigMap %s/%s: %w", ConfigMapNamespace, ConfigMapName, err)
	default:
		sources = append(sources, Source{Name: fmt.Sprintf("ConfigMap %s/%s", ConfigMapNamespace, ConfigMapName), Values: cm.Data})
	}
	return Resolve(sources...)
}
