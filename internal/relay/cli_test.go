package relay

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubbletool"
	"github.com/myelin-net/myelin/internal/testenv"
)

// cliTimeouts replace the hubble CLI's dial (5 s) and request (12 s) timeouts with
// bounds only a hang reaches: a loaded machine (-race, parallel packages) is no
// reason for a test to fail. A refused connection still fails at once.
var cliTimeouts = []string{"--timeout", "60s", "--request-timeout", "60s"}

// The upstream hubble CLI against the relay over two in-process nodes, one of them
// down: the flags it sends map, the JSON it prints carries the flows, and `hubble
// status` counts the nodes.
func TestRelayWithHubbleCLI(t *testing.T) {
	bin := hubbletool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs the hubble CLI: run make setup (scripts/build-hubble.sh)")
	}
	drop := &flow.Flow{Time: t0.Add(3e9), Node: "a", Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_POLICY_DENIED",
		Source: flow.Endpoint{IP: "10.244.0.5", Namespace: "x", Pod: "client"}, Destination: flow.Endpoint{IP: "10.244.1.5", Namespace: "x", Pod: "web"},
		Protocol: "TCP", SrcPort: 40000, DstPort: 80}
	reqs := make(chan flow.Request, 10)
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1), at("a", 2), drop}, reqs: reqs})
	relay := startRelayAddr(t, a, deadPeer(t, "b"))
	run := func(args ...string) string {
		out, err := exec.Command(bin, append(args, append(cliTimeouts, "--server", relay)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("hubble %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("observe", "-o", "json", "--verdict", "DROPPED", "--namespace", "x", "--protocol", "tcp")
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err == nil && m["flow"] != nil {
			got = append(got, m["flow"].(map[string]any))
		}
	}
	// What the node was asked, and the JSON of the one flow that matches.
	req := <-reqs
	want := flow.Request{Last: 20, Whitelist: []flow.Filter{
		{SourcePod: []string{"x/"}, Verdict: []flow.Verdict{flow.Dropped}, Protocol: []string{"tcp"}},
		{DestinationPod: []string{"x/"}, Verdict: []flow.Verdict{flow.Dropped}, Protocol: []string{"tcp"}}}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("hubble observe --verdict DROPPED --namespace x --protocol tcp asked the node for %+v, want %+v", req, want)
	}
	if len(got) != 1 || got[0]["verdict"] != "DROPPED" || got[0]["drop_reason_desc"] != "POLICY_DENIED" ||
		got[0]["source"].(map[string]any)["pod_name"] != "client" || got[0]["node_name"] != "a" {
		t.Errorf("hubble observe -o json: %d flows %v\n%s", len(got), got, out)
	}
	if out := run("observe", "--last", "2", "-o", "json"); strings.Count(out, `"flow"`) != 2 {
		t.Errorf("hubble observe --last 2: want 2 flows\n%s", out)
	}
	bad, err := exec.Command(bin, append([]string{"observe", "--from-fqdn", "example.com", "--server", relay}, cliTimeouts...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(bad), "source_fqdn") || !strings.Contains(string(bad), "not supported") {
		t.Errorf("hubble observe --from-fqdn: %v\n%s\nwant a failure naming source_fqdn as not supported", err, bad)
	}
	st := run("status")
	if !strings.Contains(st, "Connected Nodes: 1/2") || !strings.Contains(st, "b") {
		t.Errorf("hubble status with b down:\n%s\nwant Connected Nodes: 1/2 and b listed unavailable", st)
	}
}

// hubble observe --follow through the relay gets a flow a node reports after it started.
func TestRelayFollowWithHubbleCLI(t *testing.T) {
	bin := hubbletool.Bin()
	if bin == "" {
		testenv.Skipf(t, "needs the hubble CLI: run make setup (scripts/build-hubble.sh)")
	}
	live := make(chan *flow.Flow)
	reqs := make(chan flow.Request, 10)
	relay := startRelayAddr(t, startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1)}, live: live, reqs: reqs}))
	cmd := exec.Command(bin, append([]string{"observe", "--follow", "-o", "json", "--protocol", "tcp", "--server", relay}, cliTimeouts...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	<-reqs // the relay's stream to the node is open
	late := at("a", 7)
	late.Time = time.Now()
	live <- late
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"destination_port":7`) {
			return
		}
	}
	t.Errorf("hubble observe --follow ended without the live flow: %v", sc.Err())
}
