package connectivity

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/myelin-net/myelin/internal/labtools"
)

// testWait bounds what a test waits for on loopback: only a hang reaches it, never a
// slow machine (-race, parallel packages, CI's two loaded cores).
const testWait = 30 * time.Second

// serve runs `lab serve` on a loopback port and returns it. Serve takes an address,
// not a listener: the port is found free, then Serve opens it, so a port another test
// took in between is tried again with another.
func serve(t *testing.T) string {
	t.Helper()
	for range 5 {
		if addr, ok := serveOnFreePort(t); ok {
			return addr
		}
	}
	t.Fatal("lab serve found its free port taken 5 times")
	return ""
}

// serveOnFreePort starts `lab serve` on a port free a moment ago and waits until it
// answers; false when the port was taken before Serve opened it.
func serveOnFreePort(t *testing.T) (string, bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served := make(chan error, 1)
	go func() { served <- labtools.Serve(ctx, addr, "srv", 0) }()
	for deadline := time.Now().Add(testWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-served:
			if errors.Is(err, syscall.EADDRINUSE) {
				return "", false
			}
			t.Fatalf("lab serve on %s: %v", addr, err)
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, true
		}
	}
	t.Fatalf("lab serve did not start within %v", testWait)
	return "", false
}

func TestProbeHTTPAndUDP(t *testing.T) {
	addr := serve(t)
	var out strings.Builder
	if err := Probe(context.Background(), &out, ProbeOptions{Kind: "http", To: "http://" + addr + "/", Expect: "server=srv", Timeout: testWait}); err != nil {
		t.Fatalf("http probe: %v", err)
	}
	if !strings.Contains(out.String(), "server=srv client=127.0.0.1") {
		t.Errorf("http probe printed %q", out.String())
	}
	err := Probe(context.Background(), &out, ProbeOptions{Kind: "http", To: "http://" + addr + "/", Expect: "server=other", Timeout: testWait})
	if err == nil || !strings.Contains(err.Error(), `want "server=other"`) {
		t.Errorf("http probe with the wrong server: %v", err)
	}
	// udp-frag waits a third of Timeout for each of its three tries: the default (3 s)
	// left the loaded machine a second per reply.
	if err := Probe(context.Background(), &out, ProbeOptions{Kind: "udp-frag", To: addr, Size: 4000, Timeout: testWait}); err != nil {
		t.Errorf("udp-frag probe: %v", err)
	}
	closed := "127.0.0.1:1"
	if err := Probe(context.Background(), &out, ProbeOptions{Kind: "http", To: "http://" + closed + "/", Timeout: time.Second}); err == nil {
		t.Errorf("http probe to a closed port passed")
	}
	if err := Probe(context.Background(), &out, ProbeOptions{Kind: "nope"}); err == nil || !strings.Contains(err.Error(), "use one of") {
		t.Errorf("unknown kind: %v", err)
	}
}

// dnsServer answers every A question with ip, on a loopback UDP port.
func dnsServer(t *testing.T, ip [4]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: ip})
			}
			msg, _ := b.Finish()
			_, _ = pc.WriteTo(msg, from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestProbeDNS(t *testing.T) {
	server := dnsServer(t, [4]byte{10, 96, 0, 50})
	var out strings.Builder
	o := ProbeOptions{Kind: "dns", To: server, Name: "echo.ns.svc.cluster.local", Expect: "10.96.0.50", Timeout: testWait}
	if err := Probe(context.Background(), &out, o); err != nil {
		t.Fatalf("dns probe: %v", err)
	}
	o.Expect = "10.96.0.51"
	if err := Probe(context.Background(), &out, o); err == nil || !strings.Contains(err.Error(), "want 10.96.0.51") {
		t.Errorf("dns probe with the wrong address: %v", err)
	}
}

// fakeExec answers from a function of the pod and the probe's arguments.
type fakeExec func(pod string, argv []string) (string, error)

func (f fakeExec) Exec(_ context.Context, _, pod string, argv []string) (string, error) {
	return f(pod, argv)
}

func TestRunScenarioDeny(t *testing.T) {
	e := testEnv(2, "")
	answer := fakeExec(func(string, []string) (string, error) { return "server=server-b client=10.244.0.3", nil })
	refuse := fakeExec(func(string, []string) (string, error) { return "myelin: GET …: timeout", errors.New("exit status 1") })
	deny := scenario{name: "policy/denied", from: podServerA, to: "server-b", expect: "denied", probe: []string{"http"}, deny: true}
	if r := runScenario(context.Background(), Options{Exec: refuse, Myelin: "myelin"}, e, deny); r.Status != Passed {
		t.Errorf("denied and expected denied: %+v", r)
	}
	allow := deny
	allow.deny = false
	if r := runScenario(context.Background(), Options{Exec: refuse, Myelin: "myelin"}, e, allow); r.Status != Failed || r.Detail != "GET …: timeout" {
		t.Errorf("refused and expected an answer: %+v", r)
	}
	if r := runScenario(context.Background(), Options{Exec: answer, Myelin: "myelin"}, e, allow); r.Status != Passed {
		t.Errorf("answered and expected an answer: %+v", r)
	}
}
