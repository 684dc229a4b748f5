package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestLabHardeningServices: Service state stays right under churn (issue 13, outcome
// 5). A client that reuses its source ports across a scale-down to zero and back
// always reaches a current backend of its own Service, even though another Service's
// pods came up in between (and could have been given the freed backend ids); and a
// NodePort that moves from a deleted Service to a new one keeps serving the new one
// when the old one's leftovers are deleted.
func TestLabHardeningServices(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1 := labplan.NodeName(1)
	for _, d := range []struct {
		name     string
		replicas int32
	}{{"churn", 2}, {"other", 0}} {
		if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment(d.name, d.replicas), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	runningPods(t, cs, "app=client", 1)
	// No TIME_WAIT in the client's netns, so it can open a connection from the same
	// source port again at once (the lab pod's own netns, not the node's).
	if out, err := inPod("client", "sysctl", "-w", "net.ipv4.tcp_max_tw_buckets=0"); err != nil {
		t.Fatalf("client netns: tcp_max_tw_buckets=0: %v %s", err, out)
	}
	churn := createService(t, cs, "churn", "churn", nil)
	other := createService(t, cs, "other", "other", nil)
	cip := churn.Spec.ClusterIP
	runningPods(t, cs, "app=churn", 2)
	waitProgrammed(t, n1, cip+":80/TCP", 2)

	t.Run("scale to zero and back with reused source ports", func(t *testing.T) {
		scaleZeroAndBack(t, cs, n1, cip, other.Spec.ClusterIP)
	})
	t.Run("NodePort reused by a new Service", func(t *testing.T) {
		nodePortReused(t, cs, n1)
	})
	labDown(t)
}

// sourcePorts are the client ports every phase of scaleZeroAndBack uses.
var sourcePorts = []int{41001, 41002, 41003, 41004, 41005, 41006, 41007, 41008}

// fromPort requests url from the client pod with source port port and returns the
// server that answered.
func fromPort(url string, port int) (string, error) {
	out, err := inPod("client", "curl", "-sS", "-m", "5", "--local-port", fmt.Sprint(port), url)
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
	}
	var server, client string
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "server=%s client=%s", &server, &client); err != nil {
		return "", fmt.Errorf("unexpected answer %q", out)
	}
	return server, nil
}

func scaleZeroAndBack(t *testing.T, cs kubernetes.Interface, n1, cip, otherIP string) {
	url := "http://" + cip + "/"
	names := func(selector string, n int) map[string]bool {
		out := map[string]bool{}
		for _, p := range runningPods(t, cs, selector, n) {
			out[p.Name] = true
		}
		return out
	}
	before := names("app=churn", 2)
	for _, port := range sourcePorts {
		if server, err := fromPort(url, port); err != nil || !before[server] {
			t.Fatalf("before: from port %d: server %q, %v; want one of %v", port, server, err, before)
		}
	}

	scale(t, cs, "churn", 0)
	runningPods(t, cs, "app=churn", 0)
	waitProgrammed(t, n1, cip+":80/TCP", 0)
	for _, port := range sourcePorts {
		if server, err := fromPort(url, port); err == nil || !strings.Contains(err.Error(), "Couldn't connect") {
			t.Errorf("at zero: from port %d: server %q, %v; want the connection refused at once (curl: couldn't connect, not a timeout)", port, server, err)
		}
	}

	// Another Service's pods come up while the backends are gone: an agent that
	// reused the freed backend ids would give them to these pods.
	scale(t, cs, "other", 2)
	others := names("app=other", 2)
	waitProgrammed(t, n1, otherIP+":80/TCP", 2)
	scale(t, cs, "churn", 2)
	after := names("app=churn", 2)
	waitProgrammed(t, n1, cip+":80/TCP", 2)
	for _, port := range sourcePorts {
		server, err := fromPort(url, port)
		switch {
		case err != nil:
			t.Errorf("after scale-up: from port %d: %v", port, err)
		case others[server]:
			t.Errorf("after scale-up: from port %d: answered by %s, a pod of Service other", port, server)
		case !after[server]:
			t.Errorf("after scale-up: from port %d: answered by %s, want a current backend %v", port, server, after)
		}
	}
}

func nodePortReused(t *testing.T, cs kubernetes.Interface, n1 string) {
	ctx := context.Background()
	web := runningPods(t, cs, "app=churn", 2)
	port := func(nodePort int32) []corev1.ServicePort {
		return []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: nodePort}}
	}
	// Service a has no selector: its EndpointSlice is ours and outlives it, like the
	// slices the garbage collector deletes only after their Service is gone.
	a, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np-a"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: port(0)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := a.Spec.Ports[0].NodePort
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "np-a-leftover", Labels: map[string]string{discoveryv1.LabelServiceName: "np-a"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{web[0].Status.PodIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	frontend := fmt.Sprintf("198.18.0.11:%d/TCP", n)
	waitProgrammed(t, n1, frontend, 1)
	if err := cs.CoreV1().Services("default").Delete(ctx, "np-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// b takes the same nodePort as soon as the apiserver has released it.
	eventually(t, time.Minute, fmt.Sprintf("Service np-b created with nodePort %d", n), func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np-b"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "churn"}, Ports: port(n)}}, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	waitProgrammed(t, n1, frontend, 2)

	// a's leftover goes; a marker Service created after it is programmed only once the
	// agent's single worker has synced a again.
	if err := cs.DiscoveryV1().EndpointSlices("default").Delete(ctx, "np-a-leftover", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	marker := createService(t, cs, "np-marker", "churn", nil)
	waitProgrammed(t, n1, marker.Spec.ClusterIP+":80/TCP", 2)

	owner := ""
	for _, f := range servicesOf(t, n1).Frontends {
		if f.Frontend == frontend {
			owner = f.Service
		}
	}
	if owner != "default/np-b" {
		t.Errorf("frontend %s after a's leftovers were deleted: owner %q, want default/np-b", frontend, owner)
	}
	run := func(argv ...string) (string, error) { return inNode(labplan.ExtNS, argv...) }
	seen := serversOfAll(t, "reused NodePort from the external host", run, fmt.Sprintf("http://198.18.0.11:%d/", n), "", podNames(web)...)
	expectServers(t, "reused NodePort from the external host", seen, podNames(web)...)
}
