package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/myelin-net/myelin/internal/connlimit"
	"github.com/myelin-net/myelin/internal/hubble"
)

// DefaultPort is the relay's Hubble port (Hubble's).
const DefaultPort = 4245

// Config is what the relay needs.
type Config struct {
	Discover Discovery
	Version  string
	// Timeout bounds asking one peer for its status; a peer that does not answer in
	// time is unavailable for this request. 0 means 3s.
	Timeout time.Duration
	// Window is how long a followed flow waits for older flows from other nodes before
	// it is sent. 0 means 250ms.
	Window time.Duration
	// ClientBuffer is how many merged flows wait for a slow following client before the
	// relay drops them (and says how many). 0 means 4096.
	ClientBuffer int
	// SendTimeout ends a GetFlows stream whose client has taken no response for this
	// long (DeadlineExceeded), freeing its MaxCollecting slot or, for a follow, its
	// follower slot on every node. 0 means hubble.DefaultSendTimeout (30s).
	SendTimeout time.Duration
	// CollectTimeout bounds how long a peer may take to send its stored flows and
	// end, for a request without --follow; one still sending is cut and reported
	// unavailable. 0 means 30s.
	CollectTimeout time.Duration
	// Refresh is how long a discovered peer list is reused. 0 means 10s.
	Refresh time.Duration
	// PeerCreds secure the connections to the agents; nil is plaintext.
	PeerCreds credentials.TransportCredentials
	// PeerDial opens the connections to the agents; nil dials as routed.
	PeerDial func(ctx context.Context, addr string) (net.Conn, error)
	// ServerCreds secure the relay's own API; nil is plaintext.
	ServerCreds credentials.TransportCredentials
}

// Relay is the cluster's Observer.
type Relay struct {
	observerpb.UnimplementedObserverServer
	cfg   Config
	start time.Time

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn // by address
	peers   []Peer
	fetched time.Time
	// collecting bounds the requests without --follow being answered, per client
	// address and in all (MaxCollecting).
	collecting *connlimit.Bound
	// following bounds the --follow streams, per client address and in all
	// (MaxFollowing).
	following *connlimit.Bound
	// statusCalls bounds the ServerStatus and GetNodes calls being answered, per
	// client address and in all (MaxStatusCalls).
	statusCalls *connlimit.Bound

	// now is the clock the ordering window reads (time.Now; tests step their own).
	now func() time.Time
	// holding, when set, is told how many responses a follow holds after each one
	// arrives (tests wait on it instead of on time).
	holding func(n int)
}

// MaxCollecting is how many requests without --follow the relay answers at once:
// each gathers up to MaxLast responses from the nodes before it sends any and holds
// them until its client has read them, so clients that never read could otherwise
// grow the relay's memory without bound. One more is refused (ResourceExhausted). A
// client that reads nothing for Config.SendTimeout loses its slot (DeadlineExceeded).
// One client address holds at most MaxCollectingPerSource of them.
const (
	MaxCollecting          = 16
	MaxCollectingPerSource = 8
)

// MaxFollowing is how many --follow streams the relay serves at once, and
// MaxFollowingPerSource how many of them one client address holds. Each is a
// follower on every node's agent, whose network followers are bounded (64): a
// client opening follows whose filter matches nothing (nothing is ever sent, so
// no send timeout ends them) would otherwise take every node's places, and
// hubble observe --follow would get "too many follow streams" from every node.
// With MaxFollowing the relay leaves each node 16 of its 64; one address may
// hold the 32 the service map (myelin ui --server, one gRPC connection for all
// its pages) serves at most. More are refused (ResourceExhausted).
const (
	MaxFollowing          = 48
	MaxFollowingPerSource = 32
)

// MaxStatusCalls is how many ServerStatus and GetNodes calls the relay answers at
// once, and MaxStatusCallsPerSource how many of them one client address holds: each
// asks every node (one RPC per node, bounded by Config.Timeout), so a client
// sending thousands at once (128 streams per connection, 64 connections) would
// queue that many RPCs per node, grow the relay's memory and delay its real
// probes until healthy nodes are reported unavailable. More are refused
// (ResourceExhausted).
const (
	MaxStatusCalls          = 16
	MaxStatusCallsPerSource = 4
)

// discoverTimeout bounds a discovery of the peers (a list of the Nodes), which
// runs apart from the call that needed it: a caller with a short deadline would
// otherwise make every call list the Nodes again, each waiting for the last.
const discoverTimeout = 10 * time.Second

// New returns a relay; Close releases its peer connections.
func New(cfg Config) *Relay {
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = 250 * time.Millisecond
	}
	if cfg.ClientBuffer == 0 {
		cfg.ClientBuffer = 4096
	}
	if cfg.CollectTimeout == 0 {
		cfg.CollectTimeout = 30 * time.Second
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = hubble.DefaultSendTimeout
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = 10 * time.Second
	}
	if cfg.PeerCreds == nil {
		cfg.PeerCreds = insecure.NewCredentials()
	}
	return &Relay{cfg: cfg, start: time.Now(), conns: map[string]*grpc.ClientConn{},
		collecting: connlimit.New(MaxCollectingPerSource, MaxCollecting), following: connlimit.New(MaxFollowingPerSource, MaxFollowing),
		statusCalls: connlimit.New(MaxStatusCallsPerSource, MaxStatusCalls), now: time.Now}
}

// Serve answers the Hubble API on lis until ctx ends.
func (r *Relay) Serve(ctx context.Context, lis net.Listener) error {
	opts := hubble.ServerOptions()
	if r.cfg.ServerCreds != nil {
		opts = append(opts, grpc.Creds(r.cfg.ServerCreds))
	}
	g := grpc.NewServer(opts...)
	hubble.Register(g, r)
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	if err := g.Serve(lis); err != nil {
		return fmt.Errorf("serve hubble relay on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Close closes the connections to the peers.
func (r *Relay) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a, c := range r.conns {
		c.Close()
		delete(r.conns, a)
	}
}

// peerConn is a peer and the connection to it.
type peerConn struct {
	Peer
	client observerpb.ObserverClient
}

// current returns the peers (discovered at most Refresh ago) with their connections,
// dropping connections to peers that went away.
func (r *Relay) current(ctx context.Context) ([]peerConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peers == nil || time.Since(r.fetched) > r.cfg.Refresh {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discoverTimeout)
		ps, err := r.cfg.Discover(dctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("discover hubble peers: %w", err)
		}
		r.peers, r.fetched = ps, time.Now()
	}
	keep := map[string]bool{}
	out := make([]peerConn, 0, len(r.peers))
	for _, p := range r.peers {
		if p.Refused != "" { // reported unavailable by probe
			out = append(out, peerConn{Peer: p})
			continue
		}
		keep[p.Address] = true
		c, ok := r.conns[p.Address]
		if !ok {
			var err error
			opts := []grpc.DialOption{grpc.WithTransportCredentials(r.cfg.PeerCreds),
				grpc.WithConnectParams(hubble.ClientConnectParams), grpc.WithKeepaliveParams(hubble.ClientKeepalive),
				hubble.ClientCallOptions}
			if r.cfg.PeerDial != nil {
				opts = append(opts, grpc.WithContextDialer(r.cfg.PeerDial))
			}
			c, err = grpc.NewClient(p.Address, opts...)
			if err != nil {
				return nil, fmt.Errorf("connect to hubble peer %s (%s): %w", p.Name, p.Address, err)
			}
			r.conns[p.Address] = c
		}
		out = append(out, peerConn{Peer: p, client: observerpb.NewObserverClient(c)})
	}
	for a, c := range r.conns {
		if !keep[a] {
			c.Close()
			delete(r.conns, a)
		}
	}
	return out, nil
}

// peerStatus is one peer's answer to ServerStatus (err when it gave none in time).
type peerStatus struct {
	peerConn
	st  *observerpb.ServerStatusResponse
	err error
}

// probe asks every peer for its status in parallel, each bounded by Timeout; a
// Refused peer is not asked: its status is the refusal.
func (r *Relay) probe(ctx context.Context, peers []peerConn) []peerStatus {
	out := make([]peerStatus, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		if p.Refused != "" {
			out[i] = peerStatus{peerConn: p, err: errors.New("refused as a Hubble peer: " + p.Refused)}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
			defer cancel()
			st, err := p.client.ServerStatus(pctx, &observerpb.ServerStatusRequest{})
			out[i] = peerStatus{peerConn: p, st: st, err: err}
		}()
	}
	wg.Wait()
	return out
}

// takePlace takes one of b's places for ctx's client; without one, the error
// (ResourceExhausted) says why as format and a do.
func takePlace(ctx context.Context, b *connlimit.Bound, format string, a ...any) (release func(), err error) {
	release, ok := b.Take(clientAddr(ctx))
	if !ok {
		return nil, status.Errorf(codes.ResourceExhausted, format, a...)
	}
	return release, nil
}

// statusPlace takes one of the places of ServerStatus and GetNodes calls
// (MaxStatusCalls) for ctx's client.
func (r *Relay) statusPlace(ctx context.Context) (release func(), err error) {
	return takePlace(ctx, r.statusCalls, "the relay answers at most %d status requests (ServerStatus, GetNodes) "+
		"from one address and %d in all at once; try again", MaxStatusCallsPerSource, MaxStatusCalls)
}

// ServerStatus sums the peers' flow stores and says which nodes are unavailable.
func (r *Relay) ServerStatus(ctx context.Context, _ *observerpb.ServerStatusRequest) (*observerpb.ServerStatusResponse, error) {
	release, err := r.statusPlace(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	peers, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	res := &observerpb.ServerStatusResponse{Version: "myelin-relay " + r.cfg.Version, UptimeNs: uint64(time.Since(r.start))}
	var up, down uint32
	for _, s := range r.probe(ctx, peers) {
		if s.err != nil {
			down++
			res.UnavailableNodes = append(res.UnavailableNodes, s.Name)
			continue
		}
		up++
		res.NumFlows += s.st.GetNumFlows()
		res.MaxFlows += s.st.GetMaxFlows()
		res.SeenFlows += s.st.GetSeenFlows()
		res.FlowsRate += s.st.GetFlowsRate()
	}
	res.NumConnectedNodes, res.NumUnavailableNodes = wrapperspb.UInt32(up), wrapperspb.UInt32(down)
	return res, nil
}

// GetNodes lists every peer with its state.
func (r *Relay) GetNodes(ctx context.Context, _ *observerpb.GetNodesRequest) (*observerpb.GetNodesResponse, error) {
	release, err := r.statusPlace(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	peers, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	res := &observerpb.GetNodesResponse{}
	for _, s := range r.probe(ctx, peers) {
		n := &observerpb.Node{Name: s.Name, Address: s.Address, State: relaypb.NodeState_NODE_UNAVAILABLE}
		if s.err == nil {
			n.State, n.Version, n.UptimeNs = relaypb.NodeState_NODE_CONNECTED, s.st.GetVersion(), s.st.GetUptimeNs()
			n.NumFlows, n.MaxFlows, n.SeenFlows = s.st.GetNumFlows(), s.st.GetMaxFlows(), s.st.GetSeenFlows()
		}
		res.Nodes = append(res.Nodes, n)
	}
	return res, nil
}
