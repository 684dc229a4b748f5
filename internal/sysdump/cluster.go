package sysdump

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// listPage is how many objects one list request asks for.
const listPage = 500

// collectCluster writes cluster/<kind>.json, scrubbed, each holding at most budget
// bytes of objects; what cannot be read, or was cut, is recorded.
func collectCluster(ctx context.Context, a *archive, dyn dynamic.Interface, budget int) {
	for _, c := range clusterObjects {
		name := "cluster/" + c.file
		res := dyn.Resource(c.gvr).Namespace(c.namespace)
		if c.name != "" {
			obj, err := res.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				a.failed(name, err)
				continue
			}
			scrub(obj)
			_ = a.addJSON(name, obj)
			continue
		}
		list, err := listBounded(ctx, res, c, budget)
		if list != nil {
			_ = a.addJSON(name, list)
		}
		if err != nil {
			a.failed(name, err)
		}
	}
}

// listBounded lists c a page at a time, each object scrubbed, until the end or until
// the objects' JSON would pass budget bytes: then it returns the objects before and an
// error saying the list was cut after how many. A page that fails after the first
// also returns what came before.
func listBounded(ctx context.Context, res dynamic.ResourceInterface, c clusterObject, budget int) (*unstructured.UnstructuredList, error) {
	var out *unstructured.UnstructuredList
	end := func(err error) (*unstructured.UnstructuredList, error) {
		out.SetContinue("") // the list written is whole or says where it was cut
		out.SetRemainingItemCount(nil)
		return out, err
	}
	size := 0
	opts := metav1.ListOptions{Limit: listPage}
	for {
		page, err := res.List(ctx, opts)
		if err != nil && out == nil {
			return nil, err
		}
		if err != nil {
			return end(fmt.Errorf("list %s: kept the first %d, then: %w", c.gvr.Resource, len(out.Items), err))
		}
		if out == nil {
			out = &unstructured.UnstructuredList{Object: page.Object}
		}
		for _, item := range page.Items {
			scrubObject(item.Object)
			b, err := json.Marshal(item.Object)
			if err != nil {
				return end(fmt.Errorf("list %s: encode %s/%s: %w", c.gvr.Resource, item.GetNamespace(), item.GetName(), err))
			}
			if size += len(b); size > budget {
				return end(fmt.Errorf("list %s: cut at %d bytes of JSON (the bound of one file): kept the first %d, left out the rest; get them all with `%s`",
					c.gvr.Resource, budget, len(out.Items), kubectlGet(c)))
			}
			out.Items = append(out.Items, item)
		}
		opts.Continue = page.GetContinue()
		if opts.Continue == "" {
			return end(nil)
		}
	}
}

// kubectlGet is the kubectl command that lists all of c.
func kubectlGet(c clusterObject) string {
	kind := c.gvr.Resource
	if c.gvr.Group != "" {
		kind += "." + c.gvr.Group
	}
	if c.namespace != "" {
		return fmt.Sprintf("kubectl get %s -n %s -o json", kind, c.namespace)
	}
	return fmt.Sprintf("kubectl get %s -A -o json", kind)
}
