package sysdump

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// clusterObject is one kind of object myelin reads, listed in every namespace (or in
// one) into cluster/<file>. Secrets are not among them, by design.
type clusterObject struct {
	file      string
	gvr       schema.GroupVersionResource
	namespace string
	name      string // one object only
}

var clusterObjects = []clusterObject{
	{file: "nodes.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}},
	{file: "pods.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}},
	{file: "services.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "services"}},
	{file: "namespaces.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}},
	{file: "endpointslices.json", gvr: schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}},
	{file: "networkpolicies.json", gvr: schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}},
	{file: "nodeconfigs.json", gvr: schema.GroupVersionResource{Group: "myelin.io", Version: "v1alpha1", Resource: "nodeconfigs"}},
	{file: "daemonsets.json", gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, namespace: "kube-system"},
	{file: "events.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "events"}},
	{file: "myelin-config.json", gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespace: "kube-system", name: "myelin-config"},
}

// ListKinds are the resources sysdump lists (the others it gets by name), each with
// "List" as its list kind: what a fake cluster of a test must know
// (dynamicfake.NewSimpleDynamicClientWithCustomListKinds).
func ListKinds() map[schema.GroupVersionResource]string {
	out := map[schema.GroupVersionResource]string{}
	for _, c := range clusterObjects {
		if c.name == "" {
			out[c.gvr] = "List"
		}
	}
	return out
}

// collectCluster writes cluster/<kind>.json, scrubbed; what cannot be read is recorded.
func collectCluster(ctx context.Context, a *archive, dyn dynamic.Interface) {
	for _, c := range clusterObjects {
		name := "cluster/" + c.file
		res := dyn.Resource(c.gvr).Namespace(c.namespace)
		var v any
		var err error
		if c.name != "" {
			v, err = res.Get(ctx, c.name, metav1.GetOptions{})
		} else {
			v, err = res.List(ctx, metav1.ListOptions{})
		}
		if err != nil {
			a.failed(name, err)
			continue
		}
		scrub(v)
		_ = a.addJSON(name, v)
	}
}
