package hubble

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
)

// MaxStreams is how many streams (GetFlows, status calls) one client connection may
// have open at once on a node or the relay; more wait for a free one.
const MaxStreams = 128

// Keepalive: a server pings an idle connection after KeepaliveTime and drops it when
// the ping is not answered within KeepaliveTimeout (a half-open client, a powered-off
// node). Clients may ping every KeepaliveMinTime at most; the relay's ClientKeepalive
// stays above it.
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
	KeepaliveMinTime = 5 * time.Second
)

// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2 preface: a
// client that stalls there holds a connection slot (connlimit) for this long.
const HandshakeTimeout = 10 * time.Second

// ServerOptions are the limits every Hubble gRPC server (the agent's and the relay's)
// runs with; their listeners are bounded by connlimit.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.MaxConcurrentStreams(MaxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}),
	}
}

// FlowLabelsMax bounds the labels of each end of a flow: an agent sends at most this
// many of a pod (the first by key), the relay drops a flow with more and a client
// reads no more (a hostile server's flow of a million labels).
const FlowLabelsMax = 64

// FlowPoliciesMax bounds the policies a flow names as allowing it: an agent names at
// most this many (the first by namespace and name), the relay drops a flow with more
// and a client reads no more. A tenant with hundreds of policies of 253-byte names
// selecting one pod made each of its verdicts larger than ClientMaxRecv, which cut
// the whole node off the relay.
const FlowPoliciesMax = 16

// ClientMaxRecv bounds one message a Hubble client accepts (the relay reading the
// agents, the UI and `myelin observe` reading the relay): a flow is at most ~50 KB
// (FlowLabelsMax labels of the longest key and value at each end, FlowPoliciesMax
// policy names), where gRPC's
// default is 4 MiB, and a hostile server's 4 MiB messages, held by the thousand in the
// relay's windows, would exhaust its memory.
const ClientMaxRecv = 256 << 10

// ClientCallOptions are the call options of every Hubble client connection.
var ClientCallOptions = grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(ClientMaxRecv))

// ClientKeepalive is what the relay's connections to the agents (and the service
// map's to the relay) use: a peer that stops answering pings (powered off, cable
// pulled) is noticed within about 15s and its streams break, so it is reported
// NODE_UNAVAILABLE.
var ClientKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// ClientConnectParams retry a server that went away every few seconds at most (gRPC's
// default backoff grows to two minutes): the relay's connections to the agents, so a
// restarted agent is back in `hubble status` soon, and the service map's to the relay.
var ClientConnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
	MinConnectTimeout: 3 * time.Second,
}

// sourceStatus maps a Source's error to a gRPC status.
func sourceStatus(err error) error {
	if errors.Is(err, flowstore.ErrTooManyFollowers) || errors.Is(err, flowstore.ErrTooManyReaders) {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	if errors.Is(err, flow.ErrInvalidFilter) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Errorf(codes.Internal, "read flows: %v", err)
}

// NodeAddress is the address to report for a node's Hubble listener: a wildcard
// listener (":4244", "[::]:4244") is reported as the node's IP and the port.
func NodeAddress(listen net.Addr, nodeIP netip.Addr) string {
	tcp, ok := listen.(*net.TCPAddr)
	if !ok {
		return listen.String()
	}
	if tcp.IP.IsUnspecified() && nodeIP.IsValid() {
		return net.JoinHostPort(nodeIP.String(), strconv.Itoa(tcp.Port))
	}
	return tcp.String()
}
