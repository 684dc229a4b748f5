package hubble

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
)

// serveLoopback serves an Observer over src on a loopback TCP port and returns it.
func serveLoopback(t *testing.T, src flow.Source) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	Register(g, NewServer(Config{Node: "myelin-node-1", Source: src}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func roundTripFlows() []*flow.Flow {
	t0 := time.Date(2026, 11, 23, 16, 0, 0, 123456789, time.UTC)
	pod := func(ns, name, ip string) flow.Endpoint {
		return flow.Endpoint{IP: ip, Namespace: ns, Pod: name, Identity: 4242, Labels: map[string]string{"app": name}}
	}
	return []*flow.Flow{
		{Time: t0, Node: "myelin-node-1", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Direction: flow.Egress,
			Source: pod("shop", "client", "10.244.0.5"), Destination: pod("shop", "server", "10.244.1.7"),
			Protocol: "TCP", SrcPort: 40000, DstPort: 8080, TCPFlags: &flow.TCPFlags{SYN: true, ACK: true},
			Service: "shop/server", Policies: []string{"shop/allow-client"}},
		{Time: t0.Add(time.Second), Node: "myelin-node-2", Type: flow.TypeDrop, Verdict: flow.Dropped, Direction: flow.Ingress,
			Source: flow.Endpoint{IP: "192.168.1.1"}, Destination: pod("shop", "server", "10.244.1.7"),
			Protocol: "UDP", SrcPort: 5353, DstPort: 53, DropReason: "DROP_POLICY_DENIED"},
		{Time: t0.Add(2 * time.Second), Node: "myelin-node-1", Type: flow.TypeDNS, Verdict: flow.Forwarded, Direction: flow.Egress,
			Source: pod("shop", "client", "10.244.0.5"), Destination: flow.Endpoint{IP: "10.96.0.10"},
			Protocol: "UDP", SrcPort: 40001, DstPort: 53, IsReply: true,
			DNS: &flow.DNS{Query: "server.shop.svc.cluster.local.", QType: "A", Response: true, RCode: "NXDOMAIN", IPs: []string{"10.96.3.4"}}},
		{Time: t0.Add(3 * time.Second), Node: "myelin-node-2", Type: flow.TypeDrop, Verdict: flow.Dropped,
			Source: flow.Endpoint{IP: "10.244.1.9"}, Destination: flow.Endpoint{IP: "10.244.0.5"},
			Protocol: "ICMP", ICMPType: 8, DropReason: "DROP_NAT_NO_PORT"},
		{Time: t0.Add(4 * time.Second), Node: "myelin-node-2", Type: flow.TypeLost, Lost: 17},
		{Time: t0.Add(5 * time.Second), Node: "myelin-node-1", Type: flow.TypePolicyVerdict, Verdict: flow.Forwarded, Direction: flow.Ingress,
			Source: pod("shop", "client", "10.244.0.5"), Destination: pod("shop", "server", "10.244.1.7"),
			Protocol: "SCTP", SrcPort: 1000, DstPort: 2000},
	}
}

// TestClientSourceRoundTrip: flows served by the Observer come back through
// ClientSource with the same fields, lost events as TypeLost records, and the
// request reaches the server's source as it was asked.
func TestClientSourceRoundTrip(t *testing.T) {
	in := roundTripFlows()
	src := &fakeSource{flows: in}
	addr := serveLoopback(t, src)
	req := flow.Request{
		Last: 50, Since: in[0].Time.Add(-time.Hour), Until: in[0].Time.Add(time.Hour),
		Whitelist: []flow.Filter{{
			SourcePod: []string{"shop/"}, DestinationIP: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, DestinationService: []string{"shop/server"},
			Verdict: []flow.Verdict{flow.Dropped, flow.Forwarded}, Protocol: []string{"tcp", "udp"},
			Type: []flow.Type{flow.TypeDrop, flow.TypeDNS}, Node: []string{"myelin-node-1"}, Direction: []flow.Direction{flow.Ingress},
		}},
		Blacklist: []flow.Filter{{DestinationPod: []string{"kube-system/coredns"}, SourceIP: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}}},
	}
	out := make(chan *flow.Flow, len(in)+1)
	if err := NewClientSource(addr, nil).Flows(context.Background(), req, out); err != nil {
		t.Fatalf("Flows: %v", err)
	}
	close(out)
	var got []*flow.Flow
	for f := range out {
		got = append(got, f)
	}
	if len(got) != len(in) {
		t.Fatalf("got %d flows, want %d", len(got), len(in))
	}
	for i := range in {
		want := *in[i]
		if !got[i].Time.Equal(want.Time) {
			t.Errorf("flow %d: time %v, want %v", i, got[i].Time, want.Time)
		}
		got[i].Time = want.Time
		if !reflect.DeepEqual(*got[i], want) {
			t.Errorf("flow %d:\n got %+v\nwant %+v", i, *got[i], want)
		}
	}
	src.mu.Lock()
	gotReq := src.gotReq
	src.mu.Unlock()
	if !gotReq.Since.Equal(req.Since) || !gotReq.Until.Equal(req.Until) {
		t.Errorf("server got since/until %v/%v, want %v/%v", gotReq.Since, gotReq.Until, req.Since, req.Until)
	}
	gotReq.Since, gotReq.Until = req.Since, req.Until
	if !reflect.DeepEqual(gotReq, req) {
		t.Errorf("server got request\n%+v\nwant\n%+v", gotReq, req)
	}
}

// TestClientSourcePortFilter: flow.Filter's Port (either port) becomes a source-port
// and a destination-port filter, which the server reads back as the same ports.
func TestClientSourcePortFilter(t *testing.T) {
	ffs := ProtoFilters(flow.Filter{Port: []uint16{53, 8080}, Verdict: []flow.Verdict{flow.Dropped}})
	if len(ffs) != 2 || len(ffs[0].GetSourcePort()) != 2 || len(ffs[1].GetDestinationPort()) != 2 ||
		len(ffs[0].GetDestinationPort()) != 0 || len(ffs[1].GetSourcePort()) != 0 || len(ffs[1].GetVerdict()) != 1 {
		t.Fatalf("ProtoFilters: %v", ffs)
	}
	for i, ff := range ffs {
		f, err := Filter(ff)
		if err != nil || !reflect.DeepEqual(f.Port, []uint16{53, 8080}) {
			t.Errorf("filter %d back: %+v, %v", i, f, err)
		}
	}
}

// TestClientSourceErrors: an unreachable server is an error naming it.
func TestClientSourceErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	err = NewClientSource(addr, nil).Flows(context.Background(), flow.Request{}, make(chan *flow.Flow, 1))
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Flows from a closed port: %v, want an error naming %s", err, addr)
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestClientSourceSharesAConnection: the service map's requests (one per open page)
// share one connection to the server; after Close they fail.
func TestClientSourceSharesAConnection(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: raw}
	g := grpc.NewServer()
	Register(g, NewServer(Config{Node: "myelin-node-1", Source: &fakeSource{flows: roundTripFlows()}}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	src := NewClientSource(raw.Addr().String(), nil)
	for i := range 3 {
		if err := src.Flows(context.Background(), flow.Request{}, make(chan *flow.Flow, 100)); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	if n := lis.n.Load(); n != 1 {
		t.Errorf("3 requests opened %d connections, want 1", n)
	}
	src.Close()
	if err := src.Flows(context.Background(), flow.Request{}, make(chan *flow.Flow, 100)); err == nil {
		t.Error("Flows after Close succeeded")
	}
}

// TestClientSourceBoundsAHostileServer: a server (a relay, or what answers in its
// place) can't make the UI or `myelin observe` decode more than an agent sends: a
// flow's labels past FlowLabelsMax and policies past FlowPoliciesMax are not read, and a message over ClientMaxRecv ends
// the stream with an error.
func TestClientSourceBoundsAHostileServer(t *testing.T) {
	many := flow.Flow{Node: "n", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Source: flow.Endpoint{Labels: map[string]string{}}}
	for i := range 5 * FlowLabelsMax {
		many.Source.Labels[fmt.Sprintf("k%04d", i)] = "v"
	}
	for i := range 5 * FlowPoliciesMax {
		many.Policies = append(many.Policies, fmt.Sprintf("ns/p%04d", i))
	}
	huge := many
	huge.Source.Labels = map[string]string{}
	for i := range 2000 {
		huge.Source.Labels[fmt.Sprintf("k%04d", i)] = strings.Repeat("v", 200) // ~430 KB
	}
	addr := serveLoopback(t, &fakeSource{flows: []*flow.Flow{&many, &huge}})
	out := make(chan *flow.Flow, 4)
	err := NewClientSource(addr, nil).Flows(context.Background(), flow.Request{}, out)
	close(out)
	if status.Code(errors.Unwrap(err)) != codes.ResourceExhausted {
		t.Errorf("Flows with a %d-byte message: %v, want a ResourceExhausted error", ClientMaxRecv, err)
	}
	first, ok := <-out
	if !ok || len(first.Source.Labels) != FlowLabelsMax || len(first.Policies) != FlowPoliciesMax {
		t.Fatalf("the first flow (%d labels, %d policies sent): got %v, want it with %d labels and %d policies",
			5*FlowLabelsMax, 5*FlowPoliciesMax, first, FlowLabelsMax, FlowPoliciesMax)
	}
	if f, ok := <-out; ok {
		t.Errorf("the oversized flow came through with %d labels", len(f.Source.Labels))
	}
}
