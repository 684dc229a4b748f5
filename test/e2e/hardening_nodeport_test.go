package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/labtools"
)

// background is a command running in a netns while the test goes on.
type background struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

// startIn starts myelin with args inside netns ns.
func startIn(t *testing.T, ns string, args ...string) *background {
	t.Helper()
	b := &background{done: make(chan error, 1)}
	b.cmd = exec.Command("nsenter", append([]string{"--net=" + labplan.NetNSPath(ns), "--", myelinBin}, args...)...)
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %v in %s: %v", args, ns, err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	return b
}

// running reports whether the command has not exited yet.
func (b *background) running() bool {
	select {
	case err := <-b.done:
		b.done <- err
		return false
	default:
		return true
	}
}

// wait waits (up to a minute) for the command and returns its error and output.
func (b *background) wait() (string, error) {
	select {
	case err := <-b.done:
		b.done <- err
		return b.out.String(), err
	case <-time.After(time.Minute):
		_ = b.cmd.Process.Kill()
		return b.out.String(), fmt.Errorf("still running after a minute")
	}
}

// checkSession requires an http-session's output to show every request answered,
// by answer.
func checkSession(t *testing.T, what, out string, err error, answer string) {
	t.Helper()
	var res labtools.SessionResult
	if jerr := json.Unmarshal([]byte(lastLines(out, 1)), &res); jerr != nil || err != nil ||
		res.Answered != res.Requests || len(res.Answers) != 1 || res.Answers[0] != answer {
		t.Errorf("%s: %v %q; want every request answered by %q", what, err, out, answer)
	}
}

// nodePortOf returns the TCP nodePort of a Service.
func nodePortOf(t *testing.T, svc *corev1.Service) int32 {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolTCP && p.NodePort != 0 {
			return p.NodePort
		}
	}
	t.Fatalf("Service %s has no TCP nodePort", svc.Name)
	return 0
}

// TestLabMyelinNodePortFlood: an attacker on the external host floods a NodePort
// whose backend is on the other node with 50,000 SYNs from forged sources of
// 203.0.113.0/24. The NodePort SNAT tables of node-1 are small (64 embryonic and 16
// established entries, set by a NodeConfig), so the flood overruns them many times;
// still a NodePort connection opened before the flood keeps carrying data throughout,
// a pod's connections to the external host succeed during and after the flood, and
// `myelin status` shows the pressure: the embryonic table full with a warning and the
// flows created and evicted.
func TestLabMyelinNodePortFlood(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	createNodeConfig(t, "small-nodeport-nat", map[string]string{"kubernetes.io/hostname": n1},
		map[string]string{"nodeport-nat-syn-max": "64", "nodeport-nat-max": "16"})
	restartAgent(t, n1)
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "web", n2, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080", "--name", "web")
	runningPods(t, cs, "app=client", 1)
	runningPods(t, cs, "app=web", 1)
	svc := createService(t, cs, "web", "web", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	frontend := fmt.Sprintf("198.18.0.11:%d", nodePortOf(t, svc))
	waitProgrammed(t, n1, frontend+"/TCP", 1)
	before := agentStatus(t, n1).NAT
	if before.NodePort == nil {
		t.Fatalf("node-1 status without NodePort SNAT counters: %+v", before)
	}

	session := startIn(t, labplan.ExtNS, "lab", "http-session", "--to", frontend, "--count", "24", "--interval", "500ms")
	time.Sleep(2 * time.Second) // a few requests answered: the flow is established
	if !session.running() {
		out, err := session.wait()
		t.Fatalf("NodePort session ended before the flood: %v %s", err, out)
	}
	flood := startIn(t, labplan.ExtNS, "lab", "syn-flood", "--to", frontend, "--from", "203.0.113.0/24", "--count", "50000", "--rate", "10000")
	during := 0
	for i := 0; i < 20 && flood.running(); i++ {
		if got := curlExternal(t, "client"); got != "198.18.0.11" {
			t.Errorf("pod egress during the flood: the external host saw %s, want 198.18.0.11", got)
		}
		if flood.running() {
			during++
		}
	}
	out, err := flood.wait()
	if err != nil || !strings.Contains(out, `"sent":50000`) {
		t.Fatalf("syn-flood: %v %s", err, out)
	}
	if during == 0 {
		t.Errorf("no pod connection completed while the flood ran")
	}
	for i := 0; i < 3; i++ {
		curlExternal(t, "client")
	}
	out, err = session.wait()
	checkSession(t, "NodePort connection opened before the flood", out, err, "server=web client=198.18.0.11")

	st := agentStatus(t, n1)
	np := st.NAT.NodePort
	t.Logf("after the flood: %d pod connections during it; NAT %+v; NodePort %+v; maps %+v", during, st.NAT, np, st.Maps)
	if np == nil || np.Created-before.NodePort.Created < 25000 || np.Evicted <= before.NodePort.Evicted {
		t.Errorf("NodePort SNAT counters after the flood %+v (before %+v): want at least 25,000 more flows created and evictions", np, before.NodePort)
	}
	if !strings.Contains(strings.Join(st.NAT.Warnings, "\n"), "myelin_nodeport_syn") {
		t.Errorf("status warnings %q, want one for the full myelin_nodeport_syn", st.NAT.Warnings)
	}
	for _, m := range st.Maps {
		if m.Name == "myelin_snat" && m.Entries*2 > m.Max {
			t.Errorf("myelin_snat %d/%d after a NodePort flood: pods' masquerade table was used", m.Entries, m.Max)
		}
	}
	text, err := myelin("status", "--node", n1)
	if err != nil || !strings.Contains(text, "NodePort SNAT:") || !strings.Contains(text, "WARNING") {
		t.Errorf("myelin status --node %s: %v\n%s\nwant the NodePort SNAT counters and a warning", n1, err, text)
	}
	labDown(t)
}

// TestLabMyelinMasqueradeNodeSocket: a process on the node holds a TCP connection to
// the external host from port 40123 (inside the node's ephemeral range), and a pod
// opens a connection from the same port to the same destination. Masquerade takes
// its NAT port from the range above the ephemeral ports, so both connections keep
// carrying data: neither is reset or receives the other's replies.
func TestLabMyelinMasqueradeNodeSocket(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "1", "--cni", "myelin", "--profile", "native")
	n1 := labplan.NodeName(1)
	createPod(t, cs, "client", n1, map[string]string{"app": "client"}, "sleep", "infinity")
	runningPods(t, cs, "app=client", 1)
	if st := agentStatus(t, n1); st.NAT.Ports != "61000-65535" {
		t.Errorf("NAT ports %q, want 61000-65535 (above the default ephemeral range)", st.NAT.Ports)
	}
	checkNodeSocket(t, n1)
	labDown(t)
}

// checkNodeSocket runs the node's and the pod's connection from the same port.
func checkNodeSocket(t *testing.T, node string) {
	t.Helper()
	const port, target = "40123", "203.0.113.10:80"
	nodeConn := startIn(t, node, "lab", "http-session", "--to", target, "--local-port", port, "--count", "12", "--interval", "500ms")
	time.Sleep(1500 * time.Millisecond)
	if !nodeConn.running() {
		out, err := nodeConn.wait()
		t.Fatalf("the node's connection ended early: %v %s", err, out)
	}
	out, err := inPod("client", myelinBin, "lab", "http-session", "--to", target, "--local-port", port, "--count", "6", "--interval", "500ms")
	checkSession(t, "pod connection from the node socket's port", out, err, "server="+labplan.ExtNS+" client=198.18.0.11")
	nodeOut, err := nodeConn.wait()
	checkSession(t, "node connection", nodeOut, err, "server="+labplan.ExtNS+" client=198.18.0.11")
}
