package hubble

import (
	"context"
	"errors"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
)

// StreamBuffer is how many flows a GetFlows stream holds between the source and a
// client; the source drops (and reports as lost) what a slower client cannot take.
const StreamBuffer = 1024

// Stats is how much a node's flow store holds, for ServerStatus and GetNodes.
type Stats struct {
	Stored, Capacity int    // flows held now, and the history's size
	Seen             uint64 // flows seen since the agent started
}

// Config is what a node's Observer server needs.
type Config struct {
	Node    string           // the node's name
	Address string           // where peers reach it (host:port), for GetNodes
	Version string           // myelin's version
	Source  flow.Source      // the node's flow store
	Stats   func() Stats     // the store's counts; nil reports zeros
	Now     func() time.Time // clock for uptime; nil is time.Now
	// SendTimeout ends a GetFlows stream whose client has taken no response for this
	// long, freeing its follower or reader slot in the store. 0 means
	// DefaultSendTimeout (30s).
	SendTimeout time.Duration
}

// Server is a node's Hubble Observer: GetFlows, ServerStatus and GetNodes over its
// flow store. The other calls answer Unimplemented with a message naming them.
type Server struct {
	observerpb.UnimplementedObserverServer
	cfg   Config
	start time.Time
}

// NewServer returns the Observer for one node.
func NewServer(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stats == nil {
		cfg.Stats = func() Stats { return Stats{} }
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	return &Server{cfg: cfg, start: cfg.Now()}
}

// HealthService is the name Hubble servers report their health under (the hubble CLI's
// `hubble status` checks it before anything else).
const HealthService = "hubble.server.Observer"

// Register adds an Observer and the standard gRPC health service to g.
func Register(g *grpc.Server, obs observerpb.ObserverServer) {
	observerpb.RegisterObserverServer(g, obs)
	h := health.NewServer()
	h.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
}

// GetFlows streams the flows the request selects. A client that takes no response for
// SendTimeout gets DeadlineExceeded: returning ends the stream and stops the source.
func (s *Server) GetFlows(req *observerpb.GetFlowsRequest, stream observerpb.Observer_GetFlowsServer) error {
	r, err := Request(req)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	out := NewTimedSender(s.cfg.SendTimeout, stream.Send)
	defer out.Close()
	return Stream(stream.Context(), s.cfg.Source, r, out.Send)
}

// Stream runs src.Flows for r and hands each flow to send as a GetFlowsResponse, until
// the source is done or send fails.
func Stream(ctx context.Context, src flow.Source, r flow.Request, send func(*observerpb.GetFlowsResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *flow.Flow, StreamBuffer)
	done := make(chan error, 1)
	go func() { done <- src.Flows(ctx, r, ch) }()
	for {
		select {
		case f := <-ch:
			if err := send(Response(f)); err != nil {
				return err
			}
		case err := <-done:
			for { // what the source sent before it returned
				select {
				case f := <-ch:
					if err := send(Response(f)); err != nil {
						return err
					}
				default:
					if err != nil && !errors.Is(err, context.Canceled) {
						return sourceStatus(err)
					}
					return nil
				}
			}
		}
	}
}

// ServerStatus reports the node's flow store.
func (s *Server) ServerStatus(context.Context, *observerpb.ServerStatusRequest) (*observerpb.ServerStatusResponse, error) {
	st := s.cfg.Stats()
	return &observerpb.ServerStatusResponse{
		NumFlows: uint64(st.Stored), MaxFlows: uint64(st.Capacity), SeenFlows: st.Seen,
		UptimeNs: uint64(s.cfg.Now().Sub(s.start)), Version: s.version(),
	}, nil
}

// GetNodes reports this one node.
func (s *Server) GetNodes(context.Context, *observerpb.GetNodesRequest) (*observerpb.GetNodesResponse, error) {
	st := s.cfg.Stats()
	return &observerpb.GetNodesResponse{Nodes: []*observerpb.Node{{
		Name: s.cfg.Node, Version: s.version(), Address: s.cfg.Address, State: relaypb.NodeState_NODE_CONNECTED,
		UptimeNs: uint64(s.cfg.Now().Sub(s.start)), NumFlows: uint64(st.Stored), MaxFlows: uint64(st.Capacity), SeenFlows: st.Seen,
	}}}, nil
}

func (s *Server) version() string { return "myelin " + s.cfg.Version }

// GetAgentEvents is not served: myelin has no Cilium agent events.
func (s *Server) GetAgentEvents(*observerpb.GetAgentEventsRequest, observerpb.Observer_GetAgentEventsServer) error {
	return status.Error(codes.Unimplemented, "GetAgentEvents: myelin does not produce Cilium agent events; use `hubble observe` (flows) or `myelin monitor`")
}

// GetDebugEvents is not served: myelin's datapath has no Cilium debug events.
func (s *Server) GetDebugEvents(*observerpb.GetDebugEventsRequest, observerpb.Observer_GetDebugEventsServer) error {
	return status.Error(codes.Unimplemented, "GetDebugEvents: myelin's datapath has no Cilium debug events; use `myelin monitor --type trace`")
}

// GetNamespaces is not served yet.
func (s *Server) GetNamespaces(context.Context, *observerpb.GetNamespacesRequest) (*observerpb.GetNamespacesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "GetNamespaces: not served by myelin; list namespaces with kubectl")
}
