package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labdriver"
)

// TestLabMyelinServiceScale: 10,000 Services with 2 backends each are programmed
// while the agent keeps doing its other work: a pod created during the burst gets its
// network, and Services created early already work before the last is written.
func TestLabMyelinServiceScale(t *testing.T) {
	requireRoot(t)
	const n = 10000
	cs := labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	node := labplan.NodeName(1)
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), backendDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, "client", node, map[string]string{"app": "client"}, "sleep", "infinity")
	runningPods(t, cs, "app=web", 2)
	runningPods(t, cs, "app=client", 1)

	bulk, err := labdriver.BulkClient(paths.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() { created <- labdriver.CreateServices(context.Background(), bulk, "scale", "web", n, 8080) }()

	// The agent's other work goes on: CNI ADD for a new pod, status, the first Services.
	eventually(t, 5*time.Minute, "some Services programmed", func(context.Context) (bool, string) {
		st := agentStatus(t, node)
		return strings.Contains(st.KubeProxy, "myelin") && !strings.Contains(st.KubeProxy, ": 0 services") && !strings.Contains(st.KubeProxy, ": 1 services"), st.KubeProxy
	})
	createPod(t, cs, "during", node, map[string]string{"app": "during"}, "sleep", "infinity")
	runningPods(t, cs, "app=during", 1)
	first, err := cs.CoreV1().Services("default").Get(context.Background(), "scale-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "scale-0 reachable while the rest is written", func(context.Context) (bool, string) {
		out, err := inPod("during", "curl", "-sS", "-m", "2", "http://"+first.Spec.ClusterIP+"/")
		return err == nil && strings.HasPrefix(out, "server=web-"), out
	})

	if err := <-created; err != nil {
		t.Fatalf("create %d Services: %v", n, err)
	}
	want := fmt.Sprintf(": %d services", n+1) // and the kubernetes Service
	eventually(t, 10*time.Minute, "every Service programmed", func(context.Context) (bool, string) {
		st := agentStatus(t, node)
		s := servicesOf(t, node)
		return s.Synced && strings.Contains(st.KubeProxy, want), st.KubeProxy + " (want " + want + ")"
	})
	last, err := cs.CoreV1().Services("default").Get(context.Background(), fmt.Sprintf("scale-%d", n-1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitProgrammed(t, node, last.Spec.ClusterIP+":80/TCP", 2)
	if out, err := inPod("client", "curl", "-sS", "-m", "5", "http://"+last.Spec.ClusterIP+"/"); err != nil || !strings.HasPrefix(out, "server=web-") {
		t.Errorf("the last of %d Services: %v %q", n, err, out)
	}
	labDown(t)
}
