package clusterhealth

import (
	"math/rand/v2"
	"time"
)

// The probe schedule. Every agent probes each peer once per interval, spreading the
// peers evenly over it, so an agent starts at most one peer's probes (three: ICMP,
// HTTP to the node IP, HTTP to the health address) every PerPeer. docs/health.md
// derives the load of a 1,000-node cluster from these numbers.
const (
	// BaseInterval is the interval of small clusters.
	BaseInterval = 10 * time.Second
	// PerPeer is the probe budget per peer: above BaseInterval/PerPeer peers (100)
	// the interval grows linearly, so an agent never starts more than
	// 1/PerPeer (10) peers' probes a second, however large the cluster.
	PerPeer = 100 * time.Millisecond
	// Jitter is the fraction each round's length varies by (±), so agents started
	// together do not probe in lockstep.
	Jitter = 0.1
	// ProbeTimeout bounds each single probe.
	ProbeTimeout = 2 * time.Second
)

// Interval is how long one round over peers peers takes:
// max(BaseInterval, peers × PerPeer).
func Interval(peers int) time.Duration {
	return max(BaseInterval, time.Duration(peers)*PerPeer)
}

// jittered is d varied by ±Jitter, with u a uniform value in [0, 1).
func jittered(d time.Duration, u float64) time.Duration {
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*u))
}

// roundLength is the interval for peers with a random jitter.
func roundLength(peers int) time.Duration { return jittered(Interval(peers), rand.Float64()) }

// offset is when, into a round of length round, the i-th of n peers is probed.
func offset(round time.Duration, i, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return round * time.Duration(i) / time.Duration(n)
}
