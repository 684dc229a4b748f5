package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Client is what the agent asks of the apiserver.
type Client interface {
	// ListWatch lists and watches r in every namespace.
	ListWatch(r Resource) cache.ListerWatcher
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListNodes(ctx context.Context) (*corev1.NodeList, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	// CreateEvent creates ev in its namespace.
	CreateEvent(ctx context.Context, ev *corev1.Event) error
	// ServerVersion is the apiserver's GitVersion.
	ServerVersion(ctx context.Context) (string, error)
}

// Resource is a kind of object the agent watches, by its resource name.
type Resource string

// The resources the agent watches.
const (
	Nodes           Resource = "nodes"
	Pods            Resource = "pods"
	Namespaces      Resource = "namespaces"
	Services        Resource = "services"
	EndpointSlices  Resource = "endpointslices"
	NetworkPolicies Resource = "networkpolicies"
)

// Object returns an empty object of r's type (an informer's example object).
func (r Resource) Object() runtime.Object {
	switch r {
	case Nodes:
		return &corev1.Node{}
	case Pods:
		return &corev1.Pod{}
	case Namespaces:
		return &corev1.Namespace{}
	case Services:
		return &corev1.Service{}
	case EndpointSlices:
		return &discoveryv1.EndpointSlice{}
	case NetworkPolicies:
		return &networkingv1.NetworkPolicy{}
	}
	panic(fmt.Sprintf("kube: unknown resource %q", string(r)))
}

// NewInformer returns an informer on r over c which stores what transform (if not nil)
// makes of each object. Start it with Run. It keeps no namespace index: nothing the
// agent asks lists by namespace, and the index cost ~8 MiB with 50,000 pods
// (docs/scale.md).
func NewInformer(c Client, r Resource, transform cache.TransformFunc) cache.SharedIndexInformer {
	lw := c.ListWatch(r)
	if !r.streamed() {
		lw = listOnly{lw}
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, r.Object(), cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{}, // not nil: AddIndexers adds to it
	})
	if transform != nil {
		_ = inf.SetTransform(transform) // fails only once the informer runs
	}
	return inf
}

// StreamInitialLists makes the Pod and Node informers started after it fill their
// caches from a watch that sends the existing objects first (client-go's
// WatchListClient, the apiserver's streaming list), instead of one list response: each
// object is then transformed as it arrives, where a list held every full object at
// once (at 50,000 pods a heap of ~0.5 GiB at start). An apiserver without streaming
// lists gets the list as before (client-go falls back). KUBE_FEATURE_WatchListClient in
// the environment, if set, decides instead.
func StreamInitialLists() error {
	if _, set := os.LookupEnv("KUBE_FEATURE_" + string(clientfeatures.WatchListClient)); set {
		return nil
	}
	g, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return fmt.Errorf("client-go's feature gates cannot be set: streaming lists stay off")
	}
	return g.Set(clientfeatures.WatchListClient, true)
}

// streamed says whether r's informers take a streaming list when StreamInitialLists
// turned them on: Pods (every pod of the cluster, slimmed by the policy cache) and
// Nodes (a real Node lists its images: tens of KB). Services and EndpointSlices are
// listed: the agent is ready once their first pass is programmed, and a stream of
// 10,000 of each took ~0.2 s longer than a list (svc-program, docs/scale.md); the
// agent keeps records of them, not the objects, either way.
func (r Resource) streamed() bool { return r == Pods || r == Nodes }

// listOnly is a ListerWatcher that refuses the watch asking for initial events, so
// the reflector lists instead (client-go falls back to a list when that watch fails).
type listOnly struct{ cache.ListerWatcher }

func (l listOnly) Watch(o metav1.ListOptions) (watch.Interface, error) {
	if o.SendInitialEvents != nil && *o.SendInitialEvents {
		return nil, errListed
	}
	return l.ListerWatcher.Watch(o)
}

var errListed = errors.New("this resource is listed, not streamed")

// scheme holds the three API groups the agent uses, and codecs their serializers
// (protobuf and JSON).
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
}

// restClient is Client over the apiserver's REST API.
type restClient struct {
	core, discovery, networking rest.Interface
}

// New returns a Client for cfg. It uses cfg's content types (the agent asks for
// protobuf).
func New(cfg *rest.Config) (Client, error) {
	c := &restClient{}
	for _, g := range []struct {
		into *rest.Interface
		gv   schema.GroupVersion
		path string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.discovery, discoveryv1.SchemeGroupVersion, "/apis"},
		{&c.networking, networkingv1.SchemeGroupVersion, "/apis"},
	} {
		gc := rest.CopyConfig(cfg)
		gc.GroupVersion = &g.gv
		gc.APIPath = g.path
		gc.NegotiatedSerializer = codecs.WithoutConversion()
		if gc.UserAgent == "" {
			gc.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientFor(gc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", g.gv, err)
		}
		*g.into = rc
	}
	return c, nil
}

func (c *restClient) groupOf(r Resource) rest.Interface {
	switch r {
	case EndpointSlices:
		return c.discovery
	case NetworkPolicies:
		return c.networking
	}
	return c.core
}

func (c *restClient) ListWatch(r Resource) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.groupOf(r), string(r), metav1.NamespaceAll, fields.Everything())
}

func (c *restClient) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	return n, c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(n)
}

func (c *restClient) ListNodes(ctx context.Context) (*corev1.NodeList, error) {
	l := &corev1.NodeList{}
	return l, c.core.Get().Resource("nodes").Do(ctx).Into(l)
}

func (c *restClient) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	return cm, c.core.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(cm)
}

func (c *restClient) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.core.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

func (c *restClient) ServerVersion(ctx context.Context) (string, error) {
	b, err := c.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	var v version.Info
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("apiserver /version: %w", err)
	}
	return v.GitVersion, nil
}
