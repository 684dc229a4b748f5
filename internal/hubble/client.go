package hubble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/myelin-net/myelin/internal/flow"
)

// ClientSource is a flow.Source that reads a Hubble Observer API (a node's server or
// the relay) over gRPC: what `myelin ui --server` reads. Its requests share one
// connection (HTTP/2 streams; a server serves MaxStreams of them per connection, the
// service map opens at most 64), opened by the first and kept until Close.
type ClientSource struct {
	addr string
	opts []grpc.DialOption

	once sync.Once
	conn *grpc.ClientConn
	err  error // why conn is nil
}

// errSourceClosed is what Flows returns after Close.
var errSourceClosed = errors.New("the hubble client is closed")

// NewClientSource returns a Source reading the Observer at addr (host:port) over creds
// (ClientTLS.Credentials); nil is plaintext.
func NewClientSource(addr string, creds credentials.TransportCredentials) *ClientSource {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	// The connection lives as long as the service map: a relay that restarts is
	// dialled again within seconds, one that stops answering is noticed by pings.
	return &ClientSource{addr: addr, opts: []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(ClientConnectParams), grpc.WithKeepaliveParams(ClientKeepalive), ClientCallOptions}}
}

// Flows asks the server for req's flows and sends them to out, lost events as TypeLost
// records, until the server ends the stream or ctx ends.
func (c *ClientSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	c.once.Do(func() { c.conn, c.err = grpc.NewClient(c.addr, c.opts...) })
	if c.err != nil {
		return fmt.Errorf("connect to the hubble server %q: %w (give host:port, e.g. myelin-relay:4245)", c.addr, c.err)
	}
	stream, err := observerpb.NewObserverClient(c.conn).GetFlows(ctx, ProtoRequest(req))
	if err != nil {
		return fmt.Errorf("get flows from the hubble server %s: %w", c.addr, err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get flows from the hubble server %s: %w", c.addr, err)
		}
		f := FromResponse(resp)
		if f == nil {
			continue // node status and other events carry no flow
		}
		select {
		case out <- f:
		case <-ctx.Done():
			return nil
		}
	}
}

// Close closes the connection; Flows fail after it.
func (c *ClientSource) Close() error {
	c.once.Do(func() { c.err = errSourceClosed })
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// ProtoRequest is the GetFlowsRequest for a flow.Request (the inverse of Request).
func ProtoRequest(r flow.Request) *observerpb.GetFlowsRequest {
	p := &observerpb.GetFlowsRequest{Number: uint64(max(r.Last, 0)), Follow: r.Follow}
	if !r.Since.IsZero() {
		p.Since = timestamppb.New(r.Since)
	}
	if !r.Until.IsZero() {
		p.Until = timestamppb.New(r.Until)
	}
	for _, f := range r.Whitelist {
		p.Whitelist = append(p.Whitelist, ProtoFilters(f)...)
	}
	for _, f := range r.Blacklist {
		p.Blacklist = append(p.Blacklist, ProtoFilters(f)...)
	}
	return p
}

// ProtoFilters are the FlowFilters that select what f does. flow.Filter's Port means
// either port, which Hubble says with two filters (source port, destination port):
// a filter list matches if any of its filters does.
func ProtoFilters(f flow.Filter) []*flowpb.FlowFilter {
	ff := &flowpb.FlowFilter{
		SourcePod: f.SourcePod, DestinationPod: f.DestinationPod,
		SourceIp: ipStrings(f.SourceIP), DestinationIp: ipStrings(f.DestinationIP),
		SourceService: f.SourceService, DestinationService: f.DestinationService,
		Protocol: f.Protocol, NodeName: f.Node,
	}
	for _, v := range f.Verdict {
		ff.Verdict = append(ff.Verdict, flowpb.Verdict(flowpb.Verdict_value[string(v)]))
	}
	for _, d := range f.Direction {
		ff.TrafficDirection = append(ff.TrafficDirection, directionProto(d))
	}
	seen := map[int32]bool{}
	for _, t := range f.Type {
		n := eventNumber(t)
		if !seen[n] {
			seen[n] = true
			ff.EventType = append(ff.EventType, &flowpb.EventTypeFilter{Type: n})
		}
	}
	if len(f.Port) == 0 {
		return []*flowpb.FlowFilter{ff}
	}
	var ports []string
	for _, p := range f.Port {
		ports = append(ports, fmt.Sprint(p))
	}
	dst := proto.Clone(ff).(*flowpb.FlowFilter)
	ff.SourcePort, dst.DestinationPort = ports, ports
	return []*flowpb.FlowFilter{ff, dst}
}

func eventNumber(t flow.Type) int32 {
	switch t {
	case flow.TypeDrop:
		return eventDrop
	case flow.TypePolicyVerdict:
		return eventPolicyVerdict
	case flow.TypeDNS:
		return eventL7
	}
	return eventTrace
}

// ipStrings are IP filter values as Hubble takes them: an address for a single-address
// prefix, else the CIDR.
func ipStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return out
}
