package sysdump

import (
	"encoding/json"

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
// managedFields (of the object and of its pod template), annotations that hold a JSON
// object (tools keep whole objects there, env values and all), the literal value of
// every container env entry (names and valueFrom references stay) and, except in
// kube-system and myelin's own workloads (label app.kubernetes.io/name=myelin), every
// container's command, args and lifecycle hooks and its probes' commands and HTTP
// header values: command lines carry passwords in forms no pattern knows
// (--requirepass pw, -pPW, a DSN).
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

// droppedJSON stands for an annotation's JSON object in a scrubbed object.
const droppedJSON = "(a JSON object, left out by sysdump)"

func scrubObject(obj map[string]any) {
	// Tenants' command lines go; kube-system's (kube-proxy's mode, another CNI's
	// flags) and myelin's own stay: a network bug report needs them.
	name, _, _ := unstructured.NestedString(obj, "metadata", "labels", "app.kubernetes.io/name")
	ns, _, _ := unstructured.NestedString(obj, "metadata", "namespace")
	commands := name != "myelin" && ns != "kube-system"
	scrubMetadata(obj, "metadata")
	for _, p := range podSpecPaths {
		if len(p) > 1 { // a pod template: its metadata is next to its spec
			scrubMetadata(obj, append(append([]string(nil), p[:len(p)-1]...), "metadata")...)
		}
		spec, ok := nested(obj, p)
		if !ok {
			continue
		}
		for _, kind := range []string{"containers", "initContainers", "ephemeralContainers"} {
			list, _ := spec[kind].([]any)
			for _, c := range list {
				if c, ok := c.(map[string]any); ok {
					scrubContainer(c, commands)
				}
			}
		}
	}
}

// scrubMetadata removes from the metadata at path the last-applied configuration,
// managedFields, and the values of annotations that hold a JSON object.
func scrubMetadata(obj map[string]any, path ...string) {
	unstructured.RemoveNestedField(obj, append(path, "annotations", lastApplied)...)
	unstructured.RemoveNestedField(obj, append(path, "managedFields")...)
	annotations, _ := nested(obj, append(path, "annotations"))
	for k, v := range annotations {
		var o map[string]any
		if s, ok := v.(string); ok && json.Unmarshal([]byte(s), &o) == nil {
			annotations[k] = droppedJSON
		}
	}
}

// scrubContainer removes env values and, with commands, the command line, lifecycle
// hooks, probe commands and probe header values of container c.
func scrubContainer(c map[string]any, commands bool) {
	env, _ := c["env"].([]any)
	for _, e := range env {
		if e, ok := e.(map[string]any); ok {
			delete(e, "value")
		}
	}
	if !commands {
		return
	}
	delete(c, "command")
	delete(c, "args")
	delete(c, "lifecycle")
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		unstructured.RemoveNestedField(c, probe, "exec", "command") // redis-cli -a pw ping
		get, _ := nested(c, []string{probe, "httpGet"})
		headers, _ := get["httpHeaders"].([]any)
		for _, h := range headers {
			if h, ok := h.(map[string]any); ok {
				delete(h, "value")
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
