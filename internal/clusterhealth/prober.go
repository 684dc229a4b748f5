package clusterhealth

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Prober probes every peer once per round and records the results in its Matrix.
type Prober struct {
	Port int // cluster-health-port of every node
	// HealthIP is this node's health address, the source of pod-network probes, so
	// they travel pod network to pod network both ways (never masqueraded).
	HealthIP netip.Addr
	// Peers lists the other nodes; it is called at the start of every round.
	Peers  func() []Peer
	Matrix *Matrix
	// OnHello, when set, is told each answer of a peer to the node-network probe.
	OnHello func(Peer, Hello)

	interval atomic.Int64
}

// Interval is the current round's interval (before jitter).
func (p *Prober) Interval() time.Duration { return time.Duration(p.interval.Load()) }

// Run probes in rounds until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	for ctx.Err() == nil {
		p.round(ctx)
	}
}

// round probes each peer at its offset into the round, then waits for the round's end.
func (p *Prober) round(ctx context.Context) {
	peers := p.Peers()
	start := time.Now()
	p.Matrix.SetPeers(peers, start)
	p.interval.Store(int64(Interval(len(peers))))
	length := roundLength(len(peers))
	for i, peer := range peers {
		if !sleepUntil(ctx, start.Add(offset(length, i, len(peers)))) {
			return
		}
		go p.probe(ctx, peer)
	}
	sleepUntil(ctx, start.Add(length))
}

// errNoHealthIP is the pod-network result of a peer without a PodCIDR.
var errNoHealthIP = errors.New("the node has no PodCIDR yet, so no health address")

// probe runs the three probes of one peer at once, each bounded by ProbeTimeout.
func (p *Prober) probe(ctx context.Context, peer Peer) {
	var wg sync.WaitGroup
	run := func(path pathKind, f func(ctx context.Context) (time.Duration, error)) {
		defer wg.Done()
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		defer cancel()
		lat, err := f(pctx)
		if ctx.Err() != nil {
			return // the agent stops: not the peer's fault
		}
		p.Matrix.Record(peer.Name, path, Result{At: time.Now(), Latency: lat, Err: err})
	}
	wg.Add(3)
	go run(pathICMP, func(ctx context.Context) (time.Duration, error) { return ping(ctx, peer.NodeIP) })
	go run(pathNodeHTTP, func(ctx context.Context) (time.Duration, error) {
		lat, h, err := hello(ctx, netip.Addr{}, peer.NodeIP, p.Port, peer.Name)
		if err == nil && p.OnHello != nil {
			p.OnHello(peer, h)
		}
		return lat, err
	})
	go run(pathPodHTTP, func(ctx context.Context) (time.Duration, error) {
		if !peer.HealthIP.IsValid() {
			return 0, errNoHealthIP
		}
		lat, _, err := hello(ctx, p.HealthIP, peer.HealthIP, p.Port, peer.Name)
		return lat, err
	})
	wg.Wait()
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// HealthAddr is a node's health address: the first host address of its PodCIDR,
// which IPAM keeps for the node (internal/ipam).
func HealthAddr(podCIDR netip.Prefix) netip.Addr {
	if !podCIDR.IsValid() {
		return netip.Addr{}
	}
	return podCIDR.Masked().Addr().Next()
}
