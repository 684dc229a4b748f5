// Package kubefake adapts a client-go clientset to kube.Client, for unit tests that
// drive the agent's loops with client-go's fake clientset (k8s.io/client-go/kubernetes/fake).
// The agent itself never links it.
package kubefake

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/myelin-net/myelin/internal/kube"
)

// Wrap returns cs as a kube.Client.
func Wrap(cs kubernetes.Interface) kube.Client { return clientset{cs} }

type clientset struct{ cs kubernetes.Interface }

func (c clientset) ListWatch(r kube.Resource) cache.ListerWatcher {
	core, all := c.cs.CoreV1(), metav1.NamespaceAll
	switch r {
	case kube.Nodes:
		return listWatch(core.Nodes().List, core.Nodes().Watch)
	case kube.Pods:
		return listWatch(core.Pods(all).List, core.Pods(all).Watch)
	case kube.Namespaces:
		return listWatch(core.Namespaces().List, core.Namespaces().Watch)
	case kube.Services:
		return listWatch(core.Services(all).List, core.Services(all).Watch)
	case kube.EndpointSlices:
		es := c.cs.DiscoveryV1().EndpointSlices(all)
		return listWatch(es.List, es.Watch)
	case kube.NetworkPolicies:
		np := c.cs.NetworkingV1().NetworkPolicies(all)
		return listWatch(np.List, np.Watch)
	}
	panic("kubefake: unknown resource " + string(r))
}

// listWatch makes a typed client's List and Watch a cache.ListWatch.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watch cache.WatchFuncWithContext) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watch,
	}
}

func (c clientset) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (c clientset) ListNodes(ctx context.Context) (*corev1.NodeList, error) {
	return c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
}

func (c clientset) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return c.cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c clientset) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	_, err := c.cs.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (c clientset) ServerVersion(context.Context) (string, error) {
	v, err := c.cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}
