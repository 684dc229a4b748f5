package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/ui/browsertest"
)

// TestLabMyelinServiceMap makes known traffic on a 2-node lab (pod to pod across
// nodes, through a ClusterIP Service, a connection a NetworkPolicy drops), serves
// `myelin ui` over the lab's agents and loads the page in headless chromium: the
// pods, the Service and their edges appear, the dropped one red, and traffic made
// after the page loaded appears live.
func TestLabMyelinServiceMap(t *testing.T) {
	requireRoot(t)
	browser := browsertest.Start(t) // before the lab: without chromium there is nothing to test
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createPod(t, cs, "map-client", n1, map[string]string{"app": "map-client"}, "sleep", "infinity")
	createPod(t, cs, "map-server", n2, map[string]string{"app": "map-server"}, myelinBin, "lab", "serve", "--listen", ":8080")
	createPod(t, cs, "map-blocked", n2, map[string]string{"app": "map-blocked"}, myelinBin, "lab", "serve", "--listen", ":8080")
	server := runningPods(t, cs, "app=map-server", 1)[0]
	blocked := runningPods(t, cs, "app=map-blocked", 1)[0]
	runningPods(t, cs, "app=map-client", 1)
	svc := createService(t, cs, "map-web", "map-server", nil)
	waitProgrammed(t, n1, svc.Spec.ClusterIP+":80/TCP", 1)
	client := func(argv ...string) (string, error) { return inPod("map-client", argv...) }

	// Before the page: pod to pod.
	checkTCP(t, "map-client", client, server.Status.PodIP, "map-server")
	url := startUI(t)
	if err := browsertest.Open(browser, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			html, err := browsertest.Eval[string](browser, `document.body.outerHTML`)
			t.Logf("the page when the test failed (err %v):\n%s", err, lastLines(html, 60))
			out, err := myelin("observe", "--last", "40")
			t.Logf("the agents' newest flows (myelin observe --last 40, err %v):\n%s", err, out)
		}
	})
	waitPage(t, browser, `g.node[data-node="default/map-client"]`)
	waitPage(t, browser, `g.node[data-node="default/map-server"]`)
	waitPage(t, browser, `g.edge[data-edge="default/map-client->default/map-server"]:not(.dropped)`)
	waitPage(t, browser, `g.namespace[data-namespace="default"]`)
	waitPage(t, browser, `tr.flow[data-source="default/map-client"][data-destination="default/map-server"][data-verdict="FORWARDED"]`)

	// After the page loaded (the page follows): through the Service, and a drop.
	if out, err := client("curl", "-sS", "-m", "5", "http://"+svc.Spec.ClusterIP+"/"); err != nil {
		t.Errorf("curl the ClusterIP: %v %s", err, out)
	}
	waitPage(t, browser, `g.node.service[data-node="service:default/map-web"]`)
	waitPage(t, browser, `g.edge[data-edge="default/map-client->service:default/map-web"]`)
	waitPage(t, browser, `g.edge[data-edge="service:default/map-web->default/map-server"]`)
	denyIngress(t, cs, "map-blocked")
	eventually(t, time.Minute, "the policy drops connections to map-blocked", func(context.Context) (bool, string) {
		out, err := client("curl", "-sS", "-m", "1", fmt.Sprintf("http://%s:8080/", blocked.Status.PodIP))
		return err != nil, out
	})
	waitPage(t, browser, `g.edge.dropped[data-edge="default/map-client->default/map-blocked"]`)
	waitPage(t, browser, `tr.flow.dropped[data-destination="default/map-blocked"]`)
	color, err := browsertest.Eval[string](browser,
		`getComputedStyle(document.querySelector('g.edge.dropped[data-edge="default/map-client->default/map-blocked"] path')).stroke`)
	if err != nil || color != "rgb(210, 41, 30)" {
		t.Errorf("the dropped edge's stroke is %q (%v), want red", color, err)
	}
	if dropped, err := browsertest.Attr(browser, `g.edge[data-edge="default/map-client->default/map-server"]`, "class"); err != nil || len(dropped) != 1 || strings.Contains(dropped[0], "dropped") {
		t.Errorf("the allowed pod-to-pod edge's class is %q (%v), want one edge, not dropped", dropped, err)
	}

	resp, err := http.Get(url + "?window=soon")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `window="soon"`) {
		t.Errorf("GET /?window=soon: %s %q, want 400 naming the parameter", resp.Status, body)
	}
}

func waitPage(t *testing.T, browser context.Context, sel string) {
	t.Helper()
	if err := browsertest.WaitFor(browser, sel, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// startUI runs `myelin ui` on a free loopback port until the test ends and returns
// the page's URL, as it prints it.
func startUI(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, myelinBin, "ui", "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start myelin ui: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("myelin ui's stderr:\n%s", lastLines(stderr.String(), 30))
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	_, url, found := strings.Cut(strings.TrimSpace(line), " is on ")
	if err != nil || !found {
		t.Fatalf("myelin ui printed %q (%v), want the page's address; stderr: %s", line, err, stderr.String())
	}
	return url
}
