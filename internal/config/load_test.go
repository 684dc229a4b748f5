package config

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/myelin-net/myelin/internal/kube/kubefake"
)

func fakeDynamic() *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeConfigResource: "NodeConfigList"})
}

// failConfigMapGet makes every get of a ConfigMap fail with err.
func failConfigMapGet(cs *fake.Clientset, err error) {
	cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
}

func TestLoadConfigMapPresent(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ConfigMapNamespace, Name: ConfigMapName},
		Data:       map[string]string{"routing-mode": "native"},
	})
	c, err := Load(context.Background(), kubefake.Wrap(cs), fakeDynamic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ConfigMapMissing {
		t.Error("ConfigMapMissing with the ConfigMap present")
	}
	if got := c.Source("routing-mode"); got != "ConfigMap kube-system/myelin-config" {
		t.Errorf("routing-mode source = %q", got)
	}
	if got := c.Source("tunnel-port"); got != DefaultSourceName {
		t.Errorf("tunnel-port source = %q, want %q", got, DefaultSourceName)
	}
	if s := c.SourceSummary(); strings.Contains(s, "not found") {
		t.Errorf("summary %q says not found with the ConfigMap present", s)
	}
}

// A ConfigMap that does not exist means defaults, said as the source of every key
// and in the summary status shows.
func TestLoadConfigMapNotFound(t *testing.T) {
	c, err := Load(context.Background(), kubefake.Wrap(fake.NewSimpleClientset()), fakeDynamic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ConfigMapMissing {
		t.Error("ConfigMapMissing not set")
	}
	for _, e := range c.Effective {
		if e.Source != MissingConfigMapSource {
			t.Errorf("key %s: source %q, want %q", e.Key, e.Source, MissingConfigMapSource)
		}
	}
	if s := c.SourceSummary(); !strings.Contains(s, "ConfigMap kube-system/myelin-config not found") {
		t.Errorf("summary %q does not say the ConfigMap is missing", s)
	}
}

// Forbidden and unreachable are errors, never defaults.
func TestLoadConfigMapUnreadable(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"forbidden", apierrors.NewForbidden(gr, ConfigMapName, errors.New("no RBAC")), "grant the agent get on it"},
		{"unreachable", &url.Error{Op: "Get", URL: "https://198.18.0.1:6443", Err: syscall.ECONNREFUSED}, "connection refused"},
		{"server error", apierrors.NewInternalError(errors.New("etcd down")), "etcd down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewSimpleClientset()
			failConfigMapGet(cs, tc.err)
			c, err := Load(context.Background(), kubefake.Wrap(cs), fakeDynamic(), nil)
			if err == nil {
				t.Fatalf("no error; config sources %q", c.SourceSummary())
			}
			if !strings.Contains(err.Error(), "ConfigMap kube-system/myelin-config") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want the ConfigMap named and %q", err, tc.want)
			}
			if tc.name == "unreachable" && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %q does not wrap ECONNREFUSED (the agent retries on it)", err)
			}
		})
	}
}

// A NodeConfig's UID travels with its source name, so the agent's Events about it
// carry involvedObject.uid (kubectl describe lists Events by it).
func TestLoadKeepsNodeConfigUID(t *testing.T) {
	nc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "myelin.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"namespace": "kube-system", "name": "legacy", "uid": "uid-nc"},
		"spec":     map[string]any{"nodeSelector": map[string]any{}, "defaults": map[string]any{"host-routing": "legacy"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeConfigResource: "NodeConfigList"}, nc)
	c, err := Load(context.Background(), kubefake.Wrap(fake.NewSimpleClientset()), dyn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SourceUIDs["NodeConfig kube-system/legacy"]; got != "uid-nc" {
		t.Errorf("SourceUIDs = %v, want NodeConfig kube-system/legacy: uid-nc", c.SourceUIDs)
	}
}

// Only NodeConfigs in kube-system configure nodes: one in a tenant's namespace, named
// to sort last and selecting every node, changes nothing.
func TestLoadIgnoresNodeConfigsOutsideKubeSystem(t *testing.T) {
	nodeConfig := func(ns, name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "myelin.io/v1alpha1", "kind": "NodeConfig",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{"nodeSelector": map[string]any{},
				"defaults": map[string]any{"host-routing": value}},
		}}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NodeConfigResource: "NodeConfigList"},
		nodeConfig("kube-system", "admin", "legacy"), nodeConfig("tenant-a", "zzz", "bpf"))
	c, err := Load(context.Background(), kubefake.Wrap(fake.NewSimpleClientset()), dyn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if src := c.Source("host-routing"); c.HostRouting != "legacy" || src != "NodeConfig kube-system/admin" {
		t.Errorf("host-routing = %s from %q, want legacy from NodeConfig kube-system/admin (tenant-a/zzz is not read)",
			c.HostRouting, src)
	}
}
