package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// checkBIGTCP checks IPv4 BIG TCP (enable-ipv4-big-tcp) across nodes 1 and 2: both
// agents report it on, or off with a reason containing reason; then bulk TCP runs
// both ways between the client pod on node-1 and a netserver pod on node-2 (netperf
// TCP_STREAM and TCP_MAERTS, 2 s each) and must complete.
func checkBIGTCP(t *testing.T, cs kubernetes.Interface, on bool, reason string) {
	t.Helper()
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	for _, n := range []string{n1, n2} {
		b := agentStatus(t, n).BIGTCP
		if (b.Size > 0) != on || (!on && !strings.Contains(b.Reason, reason)) {
			t.Errorf("%s: BIG TCP %+v, want on %v (reason with %q)", n, b, on, reason)
		}
	}
	createPod(t, cs, "bulk", n2, map[string]string{"app": "bulk"}, "netserver", "-D", "-p", "12866")
	ip := runningPods(t, cs, "app=bulk", 1)[0].Status.PodIP
	for _, c := range []struct{ test, receiver string }{{"TCP_STREAM", n2}, {"TCP_MAERTS", n1}} {
		before := nodeRx(t, c.receiver)
		out, err := inPod("client", "netperf", "-H", ip, "-p", "12866", "-t", c.test, "-l", "2", "-P", "0")
		if err != nil {
			t.Errorf("netperf %s from the client on %s to %s on %s: %v\n%s", c.test, n1, ip, n2, err, out)
			continue
		}
		after := nodeRx(t, c.receiver)
		bytes, packets := after[0]-before[0], max(after[1]-before[1], 1)
		avg := bytes / packets
		// Logged, not asserted: TCP sizes its packets by pacing rate and windows, so
		// the average is a mix either way (the bench measures what BIG TCP buys).
		t.Logf("%s: %s's eth0 received %d bytes in %d packets (%d per packet): %s", c.test, c.receiver, bytes, packets, avg, strings.TrimSpace(out))
	}
}

// nodeRx is a node's eth0 received bytes and packets.
func nodeRx(t *testing.T, node string) [2]uint64 {
	t.Helper()
	out, err := inNode(node, "ip", "-s", "-j", "link", "show", "eth0")
	var links []struct {
		Stats struct {
			RX struct {
				Bytes   uint64 `json:"bytes"`
				Packets uint64 `json:"packets"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err != nil || json.Unmarshal([]byte(out), &links) != nil || len(links) != 1 {
		t.Fatalf("%s: ip -s -j link show eth0: %v\n%s", node, err, out)
	}
	return [2]uint64{links[0].Stats.RX.Bytes, links[0].Stats.RX.Packets}
}
