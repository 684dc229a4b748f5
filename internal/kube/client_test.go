package kube

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The client asks the apiserver's path for each call and decodes the answers into the
// agent's types (JSON here; the agent asks a real apiserver for protobuf in every lab).
func TestClientPaths(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		var out any
		switch r.URL.Path {
		case "/version":
			out = map[string]string{"gitVersion": "v1.34.4"}
		case "/api/v1/nodes/n1":
			out = corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}}
		case "/api/v1/nodes":
			out = corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
				Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}}
		case "/api/v1/namespaces/kube-system/configmaps/myelin-config":
			out = corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, Data: map[string]string{"k": "v"}}
		case "/api/v1/namespaces/default/events":
			b, _ := io.ReadAll(r.Body)
			var ev corev1.Event
			if err := json.Unmarshal(b, &ev); err != nil || ev.Reason != "Test" {
				t.Errorf("event body %s: %v", b, err)
			}
			ev.Kind, ev.APIVersion = "Event", "v1"
			out = ev
		default:
			w.WriteHeader(http.StatusNotFound)
			out = metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
				Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound}
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := c.ServerVersion(ctx); err != nil || v != "v1.34.4" {
		t.Errorf("ServerVersion = %q, %v", v, err)
	}
	if n, err := c.GetNode(ctx, "n1"); err != nil || n.Spec.PodCIDR != "10.244.1.0/24" {
		t.Errorf("GetNode = %+v, %v", n, err)
	}
	if l, err := c.ListNodes(ctx); err != nil || len(l.Items) != 2 {
		t.Errorf("ListNodes = %+v, %v", l, err)
	}
	if cm, err := c.GetConfigMap(ctx, "kube-system", "myelin-config"); err != nil || cm.Data["k"] != "v" {
		t.Errorf("GetConfigMap = %+v, %v", cm, err)
	}
	if err := c.CreateEvent(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "n1."}, Reason: "Test"}); err != nil {
		t.Errorf("CreateEvent: %v", err)
	}
	if _, err := c.GetNode(ctx, "missing"); err == nil {
		t.Error("GetNode of a missing node: no error")
	}
	lw := c.ListWatch(EndpointSlices)
	if _, err := lw.List(metav1.ListOptions{}); err == nil {
		t.Error("list endpointslices: the test server has none, want an error")
	}
	want := []string{"GET /version", "GET /api/v1/nodes/n1", "GET /api/v1/nodes", "GET /api/v1/namespaces/kube-system/configmaps/myelin-config",
		"POST /api/v1/namespaces/default/events", "GET /api/v1/nodes/missing", "GET /apis/discovery.k8s.io/v1/endpointslices"}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, seen[i], want[i])
		}
	}
}

// Every resource the agent watches has an example object of its type.
func TestResourceObjects(t *testing.T) {
	for _, r := range []Resource{Nodes, Pods, Namespaces, Services, EndpointSlices, NetworkPolicies} {
		o := r.Object()
		gvks, _, err := scheme.ObjectKinds(o)
		if err != nil || len(gvks) == 0 {
			t.Errorf("%s: %T is not in the agent's scheme: %v", r, o, err)
		}
	}
}

// A listed resource's informer gets an error for the watch that asks for initial
// events (client-go then lists) and its other watches unchanged; Pods and Nodes stream.
func TestListOnly(t *testing.T) {
	fw := watch.NewFake()
	lw := listOnly{&cache.ListWatch{WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return fw, nil }}}
	yes := true
	if _, err := lw.Watch(metav1.ListOptions{SendInitialEvents: &yes}); !errors.Is(err, errListed) {
		t.Errorf("the streaming watch gave %v, want errListed", err)
	}
	if w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "7"}); err != nil || w != fw {
		t.Errorf("a plain watch gave %v, %v", w, err)
	}
	for r, want := range map[Resource]bool{Pods: true, Nodes: true, Services: false, EndpointSlices: false, Namespaces: false, NetworkPolicies: false} {
		if r.streamed() != want {
			t.Errorf("%s streamed = %v, want %v", r, r.streamed(), want)
		}
	}
}
