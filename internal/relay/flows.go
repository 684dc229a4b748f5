package relay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/myelin-net/myelin/internal/hubble"
)

// peerDone is a peer's stream ending: err nil at its end, else why it broke.
type peerDone struct {
	name string
	err  error
}

// GetFlows asks every available peer and merges their streams in time order. Nodes
// that are unavailable, or whose stream breaks, are reported as node-status events.
func (r *Relay) GetFlows(req *observerpb.GetFlowsRequest, stream observerpb.Observer_GetFlowsServer) error {
	if _, err := hubble.Request(req); err != nil { // the same clear error a node gives
		return status.Error(codes.InvalidArgument, err.Error())
	}
	var release func()
	var err error
	if !req.GetFollow() {
		release, err = takePlace(stream.Context(), r.collecting, "the relay answers at most %d requests without --follow at once, "+
			"%d from one address; try again", MaxCollecting, MaxCollectingPerSource)
	} else {
		release, err = takePlace(stream.Context(), r.following, "the relay follows at most %d streams from one address and %d in all; "+
			"end one (hubble observe --follow) and try again", MaxFollowingPerSource, MaxFollowing)
	}
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	peers, err := r.current(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	var live []peerConn
	var down []string
	var why []string
	unreached := false // a peer that did not answer, not one refused
	for _, s := range r.probe(ctx, peers) {
		if s.err != nil {
			down = append(down, s.Name)
			why = append(why, fmt.Sprintf("%s (%s): %v", s.Name, s.Address, status.Convert(s.err).Message()))
			unreached = unreached || s.Refused == ""
			continue
		}
		live = append(live, s.peerConn)
	}
	var first []*observerpb.GetFlowsResponse
	if len(down) > 0 {
		msg := strings.Join(why, "; ")
		if unreached {
			msg += " (is the agent's hubble-listen-address set? It opens no port by default)"
		}
		first = append(first, nodeStatus(relaypb.NodeState_NODE_UNAVAILABLE, down, msg))
	}
	in := make(chan *observerpb.GetFlowsResponse, 256)
	ends := make(chan peerDone, len(live))
	pullCtx, cancelPulls := r.pullContext(ctx, req)
	defer cancelPulls()
	for _, p := range live {
		go pull(pullCtx, p, req, in, ends)
	}
	if !req.GetFollow() {
		return r.collect(ctx, stream, first, len(live), req.GetNumber(), in, ends)
	}
	return r.follow(ctx, stream, first, len(live), req.GetNumber(), in, ends)
}

// pullContext is the context of the peers' streams for req: ctx for a follow; for a
// request without --follow, ctx cut after CollectTimeout: a peer that streams its
// stored flows without end (root on a node can serve in the agent's place) would hold
// the request and its MaxCollecting slot; it is cut and reported unavailable.
func (r *Relay) pullContext(ctx context.Context, req *observerpb.GetFlowsRequest) (context.Context, context.CancelFunc) {
	if req.GetFollow() {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.cfg.CollectTimeout)
}

// pull copies one peer's stream into in, then reports its end.
func pull(ctx context.Context, p peerConn, req *observerpb.GetFlowsRequest, in chan<- *observerpb.GetFlowsResponse, ends chan<- peerDone) {
	st, err := p.client.GetFlows(ctx, req)
	for err == nil {
		var resp *observerpb.GetFlowsResponse
		if resp, err = st.Recv(); err != nil {
			break
		}
		if !fromPeer(resp, p.Name) {
			continue
		}
		select {
		case in <- resp:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		err = nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		err = errors.New("its stored flows did not end within the relay's collect timeout")
	}
	ends <- peerDone{name: p.Name, err: err}
}

// fromPeer names the node of a response from peer name as the relay knows it (from
// the Kubernetes Node it dialled), whatever the peer wrote: one compromised node
// can't pass its flows off as another's. It returns false for what only the relay
// may say (node status, which the relay reports itself), for a flow with more
// labels at one end or more allowing policies than an agent sends
// (hubble.FlowLabelsMax, hubble.FlowPoliciesMax): the response is dropped. A flow
// dated after the relay's clock is dated now: from the future it would stay the
// newest in every --last answer and on the UI's screen (a node whose clock runs
// fast keeps its flows, at the relay's time).
func fromPeer(resp *observerpb.GetFlowsResponse, name string) bool {
	if resp.GetNodeStatus() != nil {
		return false
	}
	if now := time.Now(); respTime(resp).After(now) {
		resp.Time = timestamppb.New(now)
		if f := resp.GetFlow(); f != nil {
			f.Time = resp.Time
		}
	}
	if f := resp.GetFlow(); len(f.GetSource().GetLabels()) > hubble.FlowLabelsMax || len(f.GetDestination().GetLabels()) > hubble.FlowLabelsMax ||
		len(f.GetEgressAllowedBy())+len(f.GetIngressAllowedBy()) > hubble.FlowPoliciesMax {
		return false
	}
	resp.NodeName = name
	if f := resp.GetFlow(); f != nil {
		f.NodeName = name
	}
	return true
}

func nodeStatus(state relaypb.NodeState, names []string, msg string) *observerpb.GetFlowsResponse {
	return &observerpb.GetFlowsResponse{Time: timestamppb.Now(), ResponseTypes: &observerpb.GetFlowsResponse_NodeStatus{
		NodeStatus: &relaypb.NodeStatusEvent{StateChange: state, NodeNames: names, Message: msg}}}
}

// brokenStatus reports a peer whose stream broke (nil when it ended normally or the
// client went away).
func brokenStatus(ctx context.Context, e peerDone) *observerpb.GetFlowsResponse {
	if e.err == nil || ctx.Err() != nil {
		return nil
	}
	return nodeStatus(relaypb.NodeState_NODE_UNAVAILABLE, []string{e.name}, fmt.Sprintf("%s: %v", e.name, status.Convert(e.err).Message()))
}

// collect answers a request without --follow: every peer's answer, sorted by time,
// the newest last ones (at most MaxLast, also when last is 0), held in a bounded heap.
// A client that takes no response for SendTimeout gets DeadlineExceeded.
func (r *Relay) collect(ctx context.Context, stream observerpb.Observer_GetFlowsServer, first []*observerpb.GetFlowsResponse,
	peers int, last uint64, in <-chan *observerpb.GetFlowsResponse, ends <-chan peerDone) error {
	keep := newNewest(last)
	for _, resp := range first {
		keep.add(resp)
	}
	for peers > 0 {
		select {
		case resp := <-in:
			keep.add(resp)
		case e := <-ends:
			peers--
			if s := brokenStatus(ctx, e); s != nil {
				keep.add(s)
			}
		case <-ctx.Done():
			return nil
		}
	}
	for len(in) > 0 {
		keep.add(<-in)
	}
	out := hubble.NewTimedSender(r.cfg.SendTimeout, stream.Send)
	defer out.Close()
	for _, resp := range keep.sorted() {
		if err := out.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// follow merges the peers' streams through the ordering window until the client goes
// away, takes nothing for SendTimeout, or every peer's stream ended. The first flush
// keeps the newest last flows of the peers' histories.
func (r *Relay) follow(ctx context.Context, stream observerpb.Observer_GetFlowsServer, first []*observerpb.GetFlowsResponse,
	peers int, last uint64, in <-chan *observerpb.GetFlowsResponse, ends <-chan peerDone) error {
	timed := hubble.NewTimedSender(r.cfg.SendTimeout, stream.Send)
	defer timed.Close()
	out := newSender(r.cfg.ClientBuffer, timed.Send)
	defer out.finish()
	for _, s := range first {
		out.offer(s)
	}
	var w window
	tick := time.NewTicker(r.cfg.Window / 4)
	defer tick.Stop()
	firstFlush := last > 0
	maxHeld := 4 * r.cfg.ClientBuffer
	for {
		select {
		case resp := <-in:
			heap.Push(&w, held{r: resp, t: respTime(resp), arrived: r.now()})
			if r.holding != nil {
				r.holding(w.Len())
			}
		case e := <-ends:
			peers--
			if s := brokenStatus(ctx, e); s != nil {
				heap.Push(&w, held{r: s, t: respTime(s), arrived: r.now()})
			}
		case <-tick.C:
			out.flushLost(timestamppb.Now()) // lost responses are reported even when none follow
		case <-out.done:
			return out.err
		case <-ctx.Done():
			return nil
		}
		due := w.due(r.now(), r.cfg.Window, maxHeld)
		if peers == 0 {
			due = append(due, w.due(r.now(), 0, 0)...)
		}
		if firstFlush && len(due) > 0 {
			due, firstFlush = sortLast(due, last), false
		}
		for _, resp := range due {
			out.offer(resp)
		}
		if peers == 0 {
			return out.finish()
		}
	}
}

// clientAddr is the address of ctx's gRPC client ("ip:port"; "" when unknown,
// which all such clients share).
func clientAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
