package sysdump

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// lastApplied is the annotation kubectl apply leaves: the whole object as applied,
// env values and all.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// podSpecPaths are where a pod spec sits in the objects sysdump reads and in other
// workloads: Pods, Deployments/DaemonSets/StatefulSets/Jobs, CronJobs.
var podSpecPaths = [][]string{
	{"spec"},
	{"spec", "template", "spec"},
	{"spec", "jobTemplate", "spec", "template", "spec"},
}

// scrub removes from a cluster object (or every item of a list) what a bug report
// never needs and may leak: the last-applied-configuration annotation and
// managedFields (of the object and of its pod template), and the literal value of
// every container env entry (names and valueFrom references stay).
func scrub(v any) {
	switch o := v.(type) {
	case *unstructured.UnstructuredList:
		for i := range o.Items {
			scrubObject(o.Items[i].Object)
		}
	case *unstructured.Unstructured:
		scrubObject(o.Object)
	}
}

func scrubObject(obj map[string]any) {
	unstructured.RemoveNestedField(obj, "metadata", "annotations", lastApplied)
	unstructured.RemoveNestedField(obj, "metadata", "managedFields")
	for _, p := range podSpecPaths {
		if len(p) > 1 { // a pod template: its metadata is next to its spec
			template := append(append([]string(nil), p[:len(p)-1]...), "metadata")
			unstructured.RemoveNestedField(obj, append(template, "annotations", lastApplied)...)
			unstructured.RemoveNestedField(obj, append(template, "managedFields")...)
		}
		spec, ok := nested(obj, p)
		if !ok {
			continue
		}
		for _, kind := range []string{"containers", "initContainers", "ephemeralContainers"} {
			list, _ := spec[kind].([]any)
			for _, c := range list {
				c, _ := c.(map[string]any)
				env, _ := c["env"].([]any)
				for _, e := range env {
					if e, ok := e.(map[string]any); ok {
						delete(e, "value")
					}
				}
			}
		}
	}
}

// nested returns the map at path in obj.
func nested(obj map[string]any, path []string) (map[string]any, bool) {
	for _, k := range path {
		next, ok := obj[k].(map[string]any)
		if !ok {
			return nil, false
		}
		obj = next
	}
	return obj, true
}
