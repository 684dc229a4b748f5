package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

func endpointsOf(t *testing.T, node string) map[string]api.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps, err := api.NewClient(api.NodeSocket(node)).Endpoints(ctx)
	if err != nil {
		t.Fatalf("endpoints of %s: %v", node, err)
	}
	out := map[string]api.Endpoint{}
	for _, ep := range eps {
		out[ep.ContainerID] = ep
	}
	return out
}

// requestLoop requests url from the client pod every 100 ms until stop is closed and
// returns how many requests were made and which failed.
func requestLoop(url string, stop <-chan struct{}) (total int, failures []string) {
	for {
		select {
		case <-stop:
			return total, failures
		case <-time.After(100 * time.Millisecond):
		}
		total++
		if out, err := inPod("client", "curl", "-sS", "-m", "2", url); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v %s", time.Now().Format("15:04:05.000"), err, strings.TrimSpace(out)))
		}
	}
}

// TestLabMyelinAgentRestart kills both agents (SIGKILL) and keeps them down for a while:
// a cross-node TCP stream, a request loop and a request loop through a ClusterIP Service
// see no errors, a pod created meanwhile
// fails CNI ADD with "try again later" and comes up once the agent is back, and the
// restarted agents adopt their endpoints without re-creating veths or changing IPs.
func TestLabMyelinAgentRestart(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	iperfIP, webIP := deployTrafficPods(t, cs, n1, n2)
	before := map[string]map[string]api.Endpoint{n1: endpointsOf(t, n1), n2: endpointsOf(t, n2)}

	// A ClusterIP Service in front of the web server: its flows keep their translation
	// (pinned conntrack and service maps) while no agent runs.
	svc := createService(t, cs, "web", "web", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	svcStop, svcDone := make(chan struct{}), make(chan struct{})
	var svcTotal int
	var svcFailures []string
	go func() {
		defer close(svcDone)
		svcTotal, svcFailures = requestLoop("http://"+svc.Spec.ClusterIP+"/", svcStop)
	}()

	tr := startTraffic(t, iperfIP, webIP, 15)
	time.Sleep(2 * time.Second)
	killAgent(t, n1, true)
	killAgent(t, n2, true)
	createPod(t, cs, "during", n1, map[string]string{"app": "during"}, "sleep", "infinity")
	eventually(t, time.Minute, "CNI ADD refused with try-again-later while the agent is down", func(ctx context.Context) (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=during"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "try again later") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	time.Sleep(2 * time.Second)
	releaseAgent(t, n1)
	releaseAgent(t, n2)
	runningPods(t, cs, "app=during", 1)

	tr.finish(t)
	close(svcStop)
	<-svcDone
	if len(svcFailures) > 0 || svcTotal == 0 {
		t.Errorf("requests to the ClusterIP across the agent restart: %d of %d failed (none made counts as failed): %v", len(svcFailures), svcTotal, svcFailures)
	}
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	for node, eps := range before {
		after := endpointsOf(t, node)
		for id, ep := range eps {
			a, ok := after[id]
			if !ok || a.IP != ep.IP || a.HostIfIndex != ep.HostIfIndex || a.HostIfName != ep.HostIfName {
				t.Errorf("%s: endpoint %s/%s was %s on %s(%d), after the restart %+v", node, ep.Namespace, ep.Pod, ep.IP, ep.HostIfName, ep.HostIfIndex, a)
			}
		}
	}
	labDown(t)
}
