package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/hubbletool"
	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/testenv"
)

// hubbleFlow is the part of `hubble observe -o json` the test reads.
type hubbleFlow struct {
	Time    time.Time                         `json:"time"`
	Verdict string                            `json:"verdict"`
	Node    string                            `json:"node_name"`
	Drop    string                            `json:"drop_reason_desc"`
	Source  hubbleEP                          `json:"source"`
	Dest    hubbleEP                          `json:"destination"`
	L4      map[string]map[string]any         `json:"l4"`
	Service *struct{ Name, Namespace string } `json:"destination_service"`
}

type hubbleEP struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod_name"`
}

// TestLabHubbleRelay runs the upstream hubble CLI against the lab's relay
// (127.0.0.1:4245, merging both agents): known traffic (a TCP connection between pods
// of different nodes through a Service, a connection a NetworkPolicy drops) shows up
// under --pod, --namespace, --verdict DROPPED, --protocol tcp, --to-service and
// --last N; `hubble status` counts both nodes, and with one agent killed reports it
// unavailable while flows from the other still come.
func TestLabHubbleRelay(t *testing.T) {
	bin := hubbletool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs the hubble CLI: run make setup (scripts/build-hubble.sh)")
	}
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createPod(t, cs, "hub-client", n1, map[string]string{"app": "hub-client"}, "sleep", "infinity")
	createPod(t, cs, "hub-server", n2, map[string]string{"app": "hub-server"}, myelinBin, "lab", "serve", "--listen", ":8080")
	server := runningPods(t, cs, "app=hub-server", 1)[0]
	runningPods(t, cs, "app=hub-client", 1)
	svc := createService(t, cs, "hub-web", "hub-server", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	client := func(argv ...string) (string, error) { return inPod("hub-client", argv...) }
	checkTCP(t, "hub-client", client, server.Status.PodIP, "hub-server")
	if out, err := client("curl", "-sS", "-m", "5", "http://"+svc.Spec.ClusterIP+"/"); err != nil {
		t.Errorf("curl the ClusterIP: %v %s", err, out)
	}
	denyIngress(t, cs, "hub-server")
	eventually(t, time.Minute, "the policy drops connections to hub-server", func(context.Context) (bool, string) {
		out, err := client("curl", "-sS", "-m", "1", fmt.Sprintf("http://%s:8080/", server.Status.PodIP))
		return err != nil, out
	})

	observe := func(args ...string) ([]hubbleFlow, error) {
		return hubbleObserve(bin, args...)
	}
	expectHubble(t, "status with both nodes", bin, []string{"status"}, "Connected Nodes: 2/2")
	expectHubbleFlows(t, "--pod", observe, []string{"--pod", "default/hub-client"}, func(fs []hubbleFlow) string {
		for _, f := range fs {
			if f.Source.Pod != "hub-client" && f.Dest.Pod != "hub-client" {
				return fmt.Sprintf("a flow of neither side hub-client: %+v", f)
			}
		}
		return needNodes(fs, n1, n2) // the connection is seen leaving n1 and arriving on n2
	})
	expectHubbleFlows(t, "--namespace --protocol tcp", observe, []string{"--namespace", "default", "--protocol", "tcp"}, func(fs []hubbleFlow) string {
		for _, f := range fs {
			if (f.Source.Namespace != "default" && f.Dest.Namespace != "default") || f.L4["TCP"] == nil {
				return fmt.Sprintf("a flow outside default or not TCP: %+v", f)
			}
		}
		return ""
	})
	expectHubbleFlows(t, "--verdict DROPPED", observe, []string{"--verdict", "DROPPED", "--to-pod", "default/hub-server"}, func(fs []hubbleFlow) string {
		for _, f := range fs {
			if f.Verdict != "DROPPED" {
				return fmt.Sprintf("a %s flow", f.Verdict)
			}
			if f.Drop == "POLICY_DENIED" && f.Source.Pod == "hub-client" {
				return ""
			}
		}
		return "no POLICY_DENIED drop from hub-client"
	})
	expectHubbleFlows(t, "--to-service", observe, []string{"--to-service", "default/hub-web"}, func(fs []hubbleFlow) string {
		for _, f := range fs {
			if f.Service == nil || f.Service.Name != "hub-web" {
				return fmt.Sprintf("a flow not to hub-web: %+v", f)
			}
		}
		return ""
	})
	last, err := observe("--last", "3")
	if err != nil || len(last) != 3 || !slices.IsSortedFunc(last, func(a, b hubbleFlow) int { return a.Time.Compare(b.Time) }) {
		t.Errorf("hubble observe --last 3: %v, %d flows %+v: want 3 in time order", err, len(last), last)
	}

	killAgent(t, n2, true)
	t.Cleanup(func() { releaseAgent(t, n2) })
	expectHubble(t, "status with "+n2+" down", bin, []string{"status"}, "Connected Nodes: 1/2", n2)
	if out, err := client("curl", "-sS", "-m", "5", "http://203.0.113.10/"); err != nil { // new traffic on n1 while n2's agent is gone
		t.Errorf("curl the lab's external server from hub-client: %v %s", err, out)
	}
	expectHubbleFlows(t, "flows from "+n1+" with "+n2+" down", observe, []string{"--pod", "default/hub-client"}, func(fs []hubbleFlow) string {
		return needNodes(fs, n1)
	})
}

// hubbleObserve runs `hubble observe --server 127.0.0.1:4245 -o json --last 1000 args`.
func hubbleObserve(bin string, args ...string) ([]hubbleFlow, error) {
	argv := append([]string{"observe", "--server", "127.0.0.1:4245", "-o", "json", "--last", "1000"}, args...)
	out, err := exec.Command(bin, argv...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("hubble %s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	var fs []hubbleFlow
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Flow *hubbleFlow `json:"flow"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Flow != nil {
			fs = append(fs, *r.Flow)
		}
	}
	return fs, nil
}

// expectHubbleFlows waits until hubble observe with args returns flows check accepts ("").
func expectHubbleFlows(t *testing.T, what string, observe func(...string) ([]hubbleFlow, error), args []string, check func([]hubbleFlow) string) {
	t.Helper()
	eventually(t, 30*time.Second, "hubble observe "+what, func(context.Context) (bool, string) {
		fs, err := observe(args...)
		if err != nil {
			return false, err.Error()
		}
		if len(fs) == 0 {
			return false, "no flows"
		}
		if msg := check(fs); msg != "" {
			return false, fmt.Sprintf("%d flows: %s", len(fs), msg)
		}
		t.Logf("hubble observe %s: %d flows, the last %+v", strings.Join(args, " "), len(fs), fs[len(fs)-1])
		return true, ""
	})
}

// needNodes says which of nodes no flow came from ("" when all did).
func needNodes(fs []hubbleFlow, nodes ...string) string {
	for _, n := range nodes {
		if !slices.ContainsFunc(fs, func(f hubbleFlow) bool { return f.Node == n }) {
			return "no flow from " + n
		}
	}
	return ""
}

// expectHubble waits until `hubble args --server 127.0.0.1:4245` prints every want.
func expectHubble(t *testing.T, what, bin string, args []string, want ...string) {
	t.Helper()
	argv := append(args, "--server", "127.0.0.1:4245")
	eventually(t, 30*time.Second, "hubble "+what, func(context.Context) (bool, string) {
		out, err := exec.Command(bin, argv...).CombinedOutput()
		for _, w := range want {
			if err != nil || !strings.Contains(string(out), w) {
				return false, fmt.Sprintf("hubble %s: %v\n%s", strings.Join(argv, " "), err, out)
			}
		}
		t.Logf("hubble %s:\n%s", strings.Join(argv, " "), out)
		return true, ""
	})
}
