package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/policy/conformance"
)

// pushAcrossPolicyEdits holds a connection from x/b to x/c:9100 (x/c isolated
// both ways: admitting x/b on 9100, no egress) on which only the server sends,
// as a watch or a server stream does. An edit of x/c's policy that still
// admits x/b (a port added) must not cut the push: the agent's purge keeps the
// ends the new state allows (before, x/c's next push was judged as a new
// connection out of x/c, denied, and the stream stalled until the client
// spoke). An edit that no longer admits x/b cuts it.
func (l *netpolLab) pushAcrossPolicyEdits(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	xb, xc := l.pods[conformance.PodRef{NS: "x", Pod: "b"}], l.pods[conformance.PodRef{NS: "x", Pod: "c"}]
	policyFor := func(from string, ports ...int32) *networkingv1.NetworkPolicy {
		var ps []networkingv1.NetworkPolicyPort
		for _, p := range ports {
			port, tcp := intstr.FromInt32(p), corev1.ProtocolTCP
			ps = append(ps, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port})
		}
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "x-c-push", Namespace: "x"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "c"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: ps, From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": from}}}}}},
			}}
	}
	// apply writes np and waits until x/c's agent traces port from x/b as
	// verdict: the agent publishes what it traces once the apply that
	// computed it (writes and purge) is done. The verdict must be one the
	// state before np does not give.
	node := xc.Spec.NodeName
	apply := func(np *networkingv1.NetworkPolicy, create bool, port, verdict string) {
		t.Helper()
		nps := l.cs.NetworkingV1().NetworkPolicies("x")
		var err error
		if create {
			_, err = nps.Create(ctx, np, metav1.CreateOptions{})
		} else if cur, getErr := nps.Get(ctx, np.Name, metav1.GetOptions{}); getErr != nil {
			err = getErr
		} else {
			cur.Spec = np.Spec
			_, err = nps.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		want := "x/b -> x/c " + port + ": " + verdict
		eventually(t, time.Minute, "x/c's agent tracing "+want, func(context.Context) (bool, string) {
			out, err := myelin("policy", "trace", "--node", node, "--from", "x/b", "--to", "x/c", "--port", port)
			return err == nil && strings.Contains(out, want), fmt.Sprintf("%v: %s", err, out)
		})
	}
	// 9101 is allowed while no policy isolates x/c and denied once x-c-push does:
	// the connection below opens after x/c is isolated, so its check tracks it
	// (9100 traces ALLOWED before the policy is applied too: waiting for that
	// let the dial race the apply, and a connection opened before a policy
	// isolates its pod both ways is not tracked, docs/policy.md).
	apply(policyFor("b", 9100), true, "9101/TCP", "DENIED")
	defer func() { _ = l.cs.NetworkingV1().NetworkPolicies("x").Delete(ctx, "x-c-push", metav1.DeleteOptions{}) }()

	// No keepalives: a probe of x/b's would track x/c's end again through its
	// ingress, and the push would pass without the purge keeping it.
	var ln net.Listener
	if err := netns.Do(podNetNS(xc), func() (err error) {
		ln, err = (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", ":9100")
		return err
	}); err != nil {
		t.Fatalf("listen in x/c: %v", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var client net.Conn
	if err := netns.Do(podNetNS(xb), func() (err error) {
		client, err = (&net.Dialer{Timeout: netpolProbeTimeout, KeepAlive: -1}).Dial("tcp", net.JoinHostPort(xc.Status.PodIP, "9100"))
		return err
	}); err != nil {
		t.Fatalf("x/b -> x/c:9100 (admitted): %v", err)
	}
	defer client.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(netpolProbeTimeout):
	}
	if server == nil {
		t.Fatal("x/c accepted no connection from x/b")
	}
	defer server.Close()
	push := func(what string, want bool) {
		t.Helper()
		if _, err := server.Write([]byte(what)); err != nil {
			t.Fatalf("x/c's push %q: %v", what, err)
		}
		_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		n, err := client.Read(buf)
		if got := err == nil && string(buf[:n]) == what; got != want {
			t.Errorf("x/c's push %q reached x/b: %v (read %q, %v), want %v", what, got, buf[:n], err, want)
		}
	}
	push("before", true)
	apply(policyFor("b", 9100, 9101), false, "9101/TCP", "ALLOWED")
	push("after a port was added", true)
	apply(policyFor("a", 9100, 9101), false, "9100/TCP", "DENIED")
	push("after x/b is no longer admitted", false)
}

// openBeforeIsolation: x/b, which no policy selects, downloads from a pod of
// each node (y/a on its own node, y/b on the other) on connections it opened,
// and serves a connection each of them opened; then a default-deny ingress
// policy selects x/b. The downloads go on: the agent tracked the connections
// x/b opened before it isolated x/b (docs/policy.md, "Connections open before
// isolation"; before, the peers' segments were judged as new inbound traffic,
// denied, and x/b, which only receives, sent nothing that would track them).
// The connections the peers opened into x/b stop. No keepalives: x/b's probes
// would track its connections through its open egress whatever the agent did.
func (l *netpolLab) openBeforeIsolation(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	xb := l.pods[conformance.PodRef{NS: "x", Pod: "b"}]
	listen := func(pod corev1.Pod, port string) net.Listener {
		t.Helper()
		var ln net.Listener
		if err := netns.Do(podNetNS(pod), func() (err error) {
			ln, err = (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", ":"+port)
			return err
		}); err != nil {
			t.Fatalf("listen in %s/%s: %v", pod.Namespace, pod.Name, err)
		}
		return ln
	}
	// connect dials to:port from pod and returns both ends: the dialer's and the
	// one ln accepted.
	connect := func(from, to corev1.Pod, ln net.Listener, port string) (dialed, accepted net.Conn) {
		t.Helper()
		got := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			got <- c
		}()
		if err := netns.Do(podNetNS(from), func() (err error) {
			dialed, err = (&net.Dialer{Timeout: netpolProbeTimeout, KeepAlive: -1}).Dial("tcp", net.JoinHostPort(to.Status.PodIP, port))
			return err
		}); err != nil {
			t.Fatalf("%s/%s -> %s/%s:%s: %v", from.Namespace, from.Name, to.Namespace, to.Name, port, err)
		}
		select {
		case accepted = <-got:
		case <-time.After(netpolProbeTimeout):
		}
		if accepted == nil {
			t.Fatalf("%s/%s accepted no connection from %s/%s", to.Namespace, to.Name, from.Namespace, from.Name)
		}
		return dialed, accepted
	}
	// send writes what on w and says whether r read it within wait.
	send := func(w, r net.Conn, what string, wait time.Duration) bool {
		t.Helper()
		if _, err := w.Write([]byte(what)); err != nil {
			t.Fatalf("write %q: %v", what, err)
		}
		_ = r.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		return err == nil && string(buf[:n]) == what
	}
	type pair struct {
		peer                       string
		down, up, inbound, inbServ net.Conn // x/b's download (its end, the peer's); the peer's connection into x/b (its end, x/b's)
	}
	xbLn := listen(xb, "9201")
	defer xbLn.Close()
	var pairs []pair
	for _, name := range []string{"a", "b"} {
		peer := l.pods[conformance.PodRef{NS: "y", Pod: name}]
		ln := listen(peer, "9200")
		defer ln.Close()
		p := pair{peer: "y/" + name}
		p.down, p.up = connect(xb, peer, ln, "9200")
		p.inbound, p.inbServ = connect(peer, xb, xbLn, "9201")
		for _, c := range []net.Conn{p.down, p.up, p.inbound, p.inbServ} {
			defer c.Close()
		}
		if !send(p.up, p.down, "before", 10*time.Second) || !send(p.inbound, p.inbServ, "before", 10*time.Second) {
			t.Fatalf("%s and x/b: no traffic before any policy selects x/b", p.peer)
		}
		pairs = append(pairs, p)
	}

	nps := l.cs.NetworkingV1().NetworkPolicies("x")
	deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "x-b-deny-ingress", Namespace: "x"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		}}
	if _, err := nps.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nps.Delete(ctx, deny.Name, metav1.DeleteOptions{}) }()
	want := "y/b -> x/b 9201/TCP: DENIED"
	eventually(t, time.Minute, "x/b's agent tracing "+want, func(context.Context) (bool, string) {
		out, err := myelin("policy", "trace", "--node", xb.Spec.NodeName, "--from", "y/b", "--to", "x/b", "--port", "9201/TCP")
		return err == nil && strings.Contains(out, want), fmt.Sprintf("%v: %s", err, out)
	})
	for _, p := range pairs {
		if !send(p.up, p.down, "after x/b was isolated", 10*time.Second) {
			t.Errorf("%s's data on the connection x/b opened before its isolation did not reach x/b", p.peer)
		}
		if send(p.inbound, p.inbServ, "after x/b was isolated", 3*time.Second) {
			t.Errorf("%s's data on the connection it opened into x/b reached x/b after a default-deny ingress policy isolated x/b", p.peer)
		}
	}
}
