package relay

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	relaypb "github.com/cilium/cilium/api/v1/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/hubble"
)

var t0 = time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)

// nodeSource is a node's store: its history, then (following) live flows from live.
type nodeSource struct {
	history []*flow.Flow
	live    chan *flow.Flow
	reqs    chan flow.Request // when set, gets each request
	hang    bool              // never ends a request without --follow (a hostile node)
}

func (s *nodeSource) Flows(ctx context.Context, req flow.Request, out chan<- *flow.Flow) error {
	if s.reqs != nil {
		s.reqs <- req
	}
	m := req.Matcher()
	var h []*flow.Flow
	for _, f := range s.history {
		if m.Match(f) {
			h = append(h, f)
		}
	}
	if req.Last > 0 && len(h) > req.Last {
		h = h[len(h)-req.Last:]
	}
	for _, f := range h {
		select {
		case out <- f:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.hang && !req.Follow {
		<-ctx.Done()
		return nil
	}
	for req.Follow {
		select {
		case f := <-s.live:
			if m.Match(f) {
				out <- f
			}
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// startNode serves a node's Observer on a loopback port and returns its peer entry.
func startNode(t *testing.T, name string, src flow.Source) Peer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	hubble.Register(g, hubble.NewServer(hubble.Config{Node: name, Source: src,
		Stats: func() hubble.Stats { return hubble.Stats{Stored: 2, Capacity: 4095, Seen: 5} }}))
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return Peer{Name: name, Address: lis.Addr().String()}
}

// deadPeer is an address where nothing listens.
func deadPeer(t *testing.T, name string) Peer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return Peer{Name: name, Address: addr}
}

func startRelay(t *testing.T, peers ...Peer) observerpb.ObserverClient {
	t.Helper()
	return dialRelay(t, startRelayAddr(t, peers...))
}

func dialRelay(t *testing.T, addr string) observerpb.ObserverClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return observerpb.NewObserverClient(conn)
}

// testWindow is the relay's ordering window in tests.
const testWindow = 40 * time.Millisecond

// testPeerTimeout bounds the relay's wait for a peer's status in tests: a peer that
// is up must never count as unavailable because a loaded machine (-race, parallel
// packages) answered slower than the default 3 s; peers that are down fail at once.
const testPeerTimeout = 30 * time.Second

// startRelayAddr serves a relay over peers on a loopback port and returns its address.
func startRelayAddr(t *testing.T, peers ...Peer) string {
	t.Helper()
	return serveRelay(t, New(Config{Discover: Static(peers), Version: "test", Window: testWindow, Timeout: testPeerTimeout}))
}

// serveRelay serves r on a loopback port and returns its address.
func serveRelay(t *testing.T, r *Relay) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Serve(ctx, lis)
	t.Cleanup(func() { cancel(); r.Close() })
	return lis.Addr().String()
}

// stepClock is a clock that moves only when the test steps it, so what the ordering
// window releases depends on what arrived, never on how fast the machine is.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// waitHolding waits until the relay's follow holds n responses.
func waitHolding(t *testing.T, holding <-chan int, n int) {
	t.Helper()
	for got := range holding {
		if got == n {
			return
		}
	}
}

func at(node string, sec int) *flow.Flow {
	return &flow.Flow{Time: t0.Add(time.Duration(sec) * time.Second), Node: node, Type: flow.TypeL3L4, Verdict: flow.Forwarded, Protocol: "TCP", DstPort: uint16(sec)}
}

// describe renders a response as "node:port" for flows, "unavailable:names" for node status.
func describe(r *observerpb.GetFlowsResponse) string {
	if f := r.GetFlow(); f != nil {
		return f.GetNodeName() + ":" + strconv.Itoa(int(f.GetL4().GetTCP().GetDestinationPort()))
	}
	if ns := r.GetNodeStatus(); ns != nil {
		return strings.ToLower(strings.TrimPrefix(ns.GetStateChange().String(), "NODE_")) + ":" + strings.Join(ns.GetNodeNames(), ",")
	}
	return "lost"
}

func recvAll(t *testing.T, st observerpb.Observer_GetFlowsClient) []string {
	t.Helper()
	var got []string
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, describe(r))
	}
}

func TestRelayMergesLastNAcrossNodes(t *testing.T) {
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1), at("a", 4), at("a", 6)}})
	b := startNode(t, "b", &nodeSource{history: []*flow.Flow{at("b", 2), at("b", 3), at("b", 5)}})
	c := startRelay(t, a, b)
	st, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{Number: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(recvAll(t, st), " "); got != "b:3 a:4 b:5 a:6" {
		t.Errorf("--last 4 across a and b = %q, want the newest 4 in time order: b:3 a:4 b:5 a:6", got)
	}
}

// A node's flows carry the name of the Node the relay dialled, not the one the node
// wrote: a compromised node can't pass its flows off as another's.
func TestRelayNamesFlowsByThePeer(t *testing.T) {
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1)}})
	liar := startNode(t, "b", &nodeSource{history: []*flow.Flow{at("a", 2), at("", 3)}})
	c := startRelay(t, a, liar)
	st, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{Number: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(recvAll(t, st), " "); got != "a:1 b:2 b:3" {
		t.Errorf("flows of a and of b claiming to be a = %q, want a:1 b:2 b:3", got)
	}
}

// Node status is the relay's to say: a peer's is dropped, its flows and lost events pass.
func TestFromPeerDropsNodeStatus(t *testing.T) {
	if fromPeer(nodeStatus(relaypb.NodeState_NODE_UNAVAILABLE, []string{"a"}, "forged"), "b") {
		t.Error("a peer's node status passed the relay")
	}
	lost := &observerpb.GetFlowsResponse{NodeName: "a", ResponseTypes: &observerpb.GetFlowsResponse_LostEvents{}}
	if !fromPeer(lost, "b") || lost.GetNodeName() != "b" {
		t.Errorf("a peer's lost events: passed %v, node %q; want passed, named b", fromPeer(lost, "b"), lost.GetNodeName())
	}
}

func TestRelaySurvivesADeadNode(t *testing.T) {
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1), at("a", 2)}})
	c := startRelay(t, a, deadPeer(t, "b"))
	st, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(recvAll(t, st), " ")
	if !strings.Contains(got, "a:1 a:2") || !strings.Contains(got, "unavailable:b") {
		t.Errorf("flows with b down = %q: want a's flows and b reported unavailable", got)
	}
	ss, err := c.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ss.GetNumConnectedNodes().GetValue() != 1 || ss.GetNumUnavailableNodes().GetValue() != 1 ||
		strings.Join(ss.GetUnavailableNodes(), ",") != "b" || ss.GetNumFlows() != 2 || ss.GetMaxFlows() != 4095 {
		t.Errorf("ServerStatus = %v: want 1 connected, b unavailable, a's counts", ss)
	}
	nodes, err := c.GetNodes(context.Background(), &observerpb.GetNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 2 || nodes.GetNodes()[0].GetState() != relaypb.NodeState_NODE_CONNECTED ||
		nodes.GetNodes()[1].GetState() != relaypb.NodeState_NODE_UNAVAILABLE {
		t.Errorf("GetNodes = %v, %v: want a connected, b unavailable", nodes, err)
	}
}

func TestRelayFollowOrdersLiveFlows(t *testing.T) {
	la, lb := make(chan *flow.Flow), make(chan *flow.Flow)
	a := startNode(t, "a", &nodeSource{history: []*flow.Flow{at("a", 1), at("a", 2)}, live: la})
	b := startNode(t, "b", &nodeSource{history: []*flow.Flow{at("b", 3)}, live: lb})
	r := New(Config{Discover: Static([]Peer{a, b}), Version: "test", Window: testWindow, Timeout: testPeerTimeout})
	clock := &stepClock{t: t0}
	holding := make(chan int, 8)
	r.now, r.holding = clock.now, func(n int) { holding <- n }
	c := dialRelay(t, serveRelay(t, r))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Number: 2, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(got []string, n int) []string {
		t.Helper()
		for len(got) < n {
			r, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, describe(r))
		}
		return got
	}
	waitHolding(t, holding, 3) // both nodes' histories wait in the window
	clock.step(testWindow)
	got := recv(nil, 2) // the first flush: the newest 2 of the histories
	lb <- at("b", 5)    // b reports a later flow first; a's earlier one sorts before it
	la <- at("a", 4)
	waitHolding(t, holding, 2)
	clock.step(testWindow)
	if s := strings.Join(recv(got, 4), " "); s != "a:2 b:3 a:4 b:5" {
		t.Errorf("followed stream = %q, want a:2 b:3 a:4 b:5", s)
	}
}

func TestRelayRejectsBadFilter(t *testing.T) {
	c := startRelay(t, startNode(t, "a", &nodeSource{}))
	st, err := c.GetFlows(context.Background(), &observerpb.GetFlowsRequest{First: true})
	if err == nil {
		_, err = st.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "--first") {
		t.Errorf("GetFlows(first): %v, want an error naming --first", err)
	}
}

func TestParsePeer(t *testing.T) {
	for in, want := range map[string]Peer{
		"198.18.0.11:4244":    {Name: "198.18.0.11:4244", Address: "198.18.0.11:4244"},
		"n1=198.18.0.11:4244": {Name: "n1", Address: "198.18.0.11:4244"},
	} {
		if got, err := ParsePeer(in); err != nil || got != want {
			t.Errorf("ParsePeer(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"198.18.0.11", "n1=:4244", "n1=h:99999", "=h:1"} {
		if _, err := ParsePeer(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParsePeer(%q): %v, want an error naming it", bad, err)
		}
	}
}

// PeersFromNodes takes each Node's InternalIP and skips a Node without one. It refuses
// (reported, not dialed) an address that is not unicast (loopback: the relay's own
// host) and every Node of an address two Nodes share (a compromised kubelet's lie: the
// honest one can't be told, whichever is older), naming the other; link-local
// addresses are unicast, as the nodes' routing takes them.
func TestPeersFromNodes(t *testing.T) {
	node := func(name, ip string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
		if ip != "" {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		return n
	}
	got := PeersFromNodes([]corev1.Node{
		node("n2", "198.18.0.12"), node("liar", "198.18.0.12"), node("n1", "198.18.0.11"), node("n3", ""),
		node("lo", "127.0.0.1"), node("ll", "169.254.0.7"), node("junk", "not-an-ip"), node("mc", "224.0.0.1"),
	}, 4244)
	want := []Peer{
		{"junk", "not-an-ip:4244", `its InternalIP "not-an-ip" is not a unicast IP address`},
		{"liar", "198.18.0.12:4244", "its InternalIP 198.18.0.12 is also Node n2's"},
		{"ll", "169.254.0.7:4244", ""},
		{"lo", "127.0.0.1:4244", `its InternalIP "127.0.0.1" is not a unicast IP address`},
		{"mc", "224.0.0.1:4244", `its InternalIP "224.0.0.1" is not a unicast IP address`},
		{"n1", "198.18.0.11:4244", ""},
		{"n2", "198.18.0.12:4244", "its InternalIP 198.18.0.12 is also Node liar's"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("PeersFromNodes =\n%q\nwant\n%q", got, want)
	}
}

// A refused peer is reported unavailable with its reason by ServerStatus and GetNodes
// and is never dialed.
func TestRelayReportsRefusedPeers(t *testing.T) {
	r := New(Config{Discover: Static([]Peer{{Name: "liar", Address: "198.18.0.12:4244", Refused: "its InternalIP 198.18.0.12 is also Node n2's"}})})
	defer r.Close()
	st, err := r.ServerStatus(context.Background(), &observerpb.ServerStatusRequest{})
	if err != nil || !slices.Equal(st.GetUnavailableNodes(), []string{"liar"}) || st.GetNumConnectedNodes().GetValue() != 0 {
		t.Fatalf("ServerStatus = %v %v, want liar unavailable and none connected", st, err)
	}
	nodes, err := r.GetNodes(context.Background(), &observerpb.GetNodesRequest{})
	if err != nil || len(nodes.GetNodes()) != 1 || nodes.GetNodes()[0].GetState() != relaypb.NodeState_NODE_UNAVAILABLE {
		t.Fatalf("GetNodes = %v %v, want liar unavailable", nodes, err)
	}
	if len(r.conns) != 0 {
		t.Errorf("the relay made %d connections for a refused peer", len(r.conns))
	}
}
