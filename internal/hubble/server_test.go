package hubble

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/myelin-net/myelin/internal/flow"
)

// fakeSource sends its stored flows and records the request it got.
type fakeSource struct {
	mu     sync.Mutex
	flows  []*flow.Flow
	gotReq flow.Request
}

func (s *fakeSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	s.mu.Lock()
	s.gotReq = req
	s.mu.Unlock()
	for _, f := range s.flows {
		select {
		case out <- f:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dialServer starts srv on an in-memory listener and returns a client connection
// (with opts).
func dialServer(t *testing.T, srv observerpb.ObserverServer, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	Register(g, srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// recvAll receives a stream's responses until it ends: nil at its end, else the
// error that ended it, with what came before.
func recvAll(stream observerpb.Observer_GetFlowsClient) ([]*observerpb.GetFlowsResponse, error) {
	var rs []*observerpb.GetFlowsResponse
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			return rs, nil
		}
		if err != nil {
			return rs, err
		}
		rs = append(rs, r)
	}
}

func TestServerGetFlows(t *testing.T) {
	src := &fakeSource{flows: []*flow.Flow{
		{Time: t0, Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP"},
		{Time: t0.Add(time.Second), Node: "n1", Type: flow.TypeLost, Lost: 3},
		{Time: t0.Add(2 * time.Second), Node: "n1", Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_POLICY_DENIED"},
	}}
	conn := dialServer(t, NewServer(Config{Node: "n1", Source: src}))
	c := observerpb.NewObserverClient(conn)
	stream, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{Number: 5,
		Whitelist: []*flowpb.FlowFilter{{Verdict: []flowpb.Verdict{flowpb.Verdict_DROPPED}}}})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := recvAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		if f := r.GetFlow(); f != nil {
			got = append(got, f.GetVerdict().String())
		} else {
			got = append(got, "lost")
		}
	}
	if strings.Join(got, ",") != "FORWARDED,lost,DROPPED" {
		t.Errorf("stream = %v, want FORWARDED,lost,DROPPED in order", got)
	}
	if src.gotReq.Last != 5 || len(src.gotReq.Whitelist) != 1 || src.gotReq.Whitelist[0].Verdict[0] != flow.Dropped {
		t.Errorf("source got %+v: want Last 5 and a DROPPED whitelist", src.gotReq)
	}
}

// A pod chooses the names it queries: a name with a byte that is not UTF-8 must not
// stop the stream (a proto3 string must be UTF-8), or a pod could hide every flow
// after it from hubble observe.
func TestServerGetFlowsDNSNameNotUTF8(t *testing.T) {
	// flow.ParseDNS escapes such a name (TestParseDNSEscapesQuery); unescaped, as
	// here, the response repairs it.
	d := &flow.DNS{Query: "evil\xff.com.", QType: "A"}
	src := &fakeSource{flows: []*flow.Flow{
		{Time: t0, Node: "n1", Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP"},
		{Time: t0.Add(time.Second), Node: "n1", Type: flow.TypeDNS, Verdict: flow.Forwarded, Protocol: "UDP", DstPort: 53, DNS: d},
		{Time: t0.Add(2 * time.Second), Node: "n1", Type: flow.TypeDrop, Verdict: flow.Dropped, DropReason: "DROP_POLICY_DENIED"},
	}}
	c := observerpb.NewObserverClient(dialServer(t, NewServer(Config{Node: "n1", Source: src})))
	stream, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{Number: 3})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := recvAll(stream)
	if err != nil {
		t.Fatalf("stream ended after %d flows: %v", len(rs), err)
	}
	var got []string
	for _, r := range rs {
		f := r.GetFlow()
		got = append(got, f.GetVerdict().String())
		if dns := f.GetL7().GetDns(); dns != nil && dns.GetQuery() != "evil\uFFFD.com." {
			t.Errorf("DNS query %q, want %q", dns.GetQuery(), "evil\uFFFD.com.")
		}
	}
	if strings.Join(got, ",") != "FORWARDED,FORWARDED,DROPPED" {
		t.Errorf("stream = %v, want FORWARDED,FORWARDED,DROPPED: the flows around the DNS one and the DNS one", got)
	}
}

func TestServerRejectsBadFilter(t *testing.T) {
	c := observerpb.NewObserverClient(dialServer(t, NewServer(Config{Source: &fakeSource{}})))
	stream, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{
		Whitelist: []*flowpb.FlowFilter{{SourceFqdn: []string{"example.com"}}}})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "source_fqdn") {
		t.Errorf("GetFlows with --from-fqdn: %v, want InvalidArgument naming source_fqdn", err)
	}
}

// An IP filter value is parsed when the request comes in: an oversized or malformed
// one is refused with InvalidArgument naming the field, before any flow is matched.
func TestServerRejectsBadIPFilter(t *testing.T) {
	src := &fakeSource{}
	c := observerpb.NewObserverClient(dialServer(t, NewServer(Config{Source: src})))
	cases := []struct {
		name string
		ff   *flowpb.FlowFilter
		want string
	}{
		{"oversized", &flowpb.FlowFilter{SourceIp: []string{strings.Repeat("1", 3<<20)}}, "source_ip"},
		{"malformed", &flowpb.FlowFilter{DestinationIp: []string{"10.0.0.256"}}, `destination_ip "10.0.0.256"`},
		{"oversized pod", &flowpb.FlowFilter{SourcePod: []string{"x/" + strings.Repeat("p", flow.MaxFilterValueLen)}}, "source_pod"},
	}
	for _, c2 := range cases {
		stream, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{Whitelist: []*flowpb.FlowFilter{c2.ff}})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%s: GetFlows: %.300v, want InvalidArgument naming %s", c2.name, err, c2.want)
		}
		if len(status.Convert(err).Message()) > 500 {
			t.Errorf("%s: a message of %d bytes: want the value cut short", c2.name, len(status.Convert(err).Message()))
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.gotReq.Whitelist != nil {
		t.Errorf("the source got %+v: want no request reaching it", src.gotReq)
	}
}

func TestServerStatusNodesHealth(t *testing.T) {
	now := t0
	srv := NewServer(Config{Node: "n1", Address: "198.18.0.11:4244", Version: "v1", Source: &fakeSource{},
		Stats: func() Stats { return Stats{Stored: 10, Capacity: 4095, Seen: 12} }, Now: func() time.Time { return now }})
	now = t0.Add(time.Minute)
	conn := dialServer(t, srv)
	c := observerpb.NewObserverClient(conn)
	st, err := c.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || st.GetNumFlows() != 10 || st.GetMaxFlows() != 4095 || st.GetSeenFlows() != 12 || st.GetUptimeNs() != uint64(time.Minute) {
		t.Errorf("ServerStatus = %v, %v", st, err)
	}
	nodes, err := c.GetNodes(context.Background(), &observerpb.GetNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetName() != "n1" || nodes.GetNodes()[0].GetAddress() != "198.18.0.11:4244" {
		t.Errorf("GetNodes = %v, %v", nodes, err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: HealthService})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of hubble.server.Observer = %v, %v", h, err)
	}
	if _, err := c.GetNamespaces(context.Background(), &observerpb.GetNamespacesRequest{}); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "GetNamespaces") {
		t.Errorf("GetNamespaces: %v, want Unimplemented naming it", err)
	}
}
