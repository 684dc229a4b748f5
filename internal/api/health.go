package api

import (
	"context"
	"net/http"
	"time"
)

// HealthMatrix is what one agent knows of its reachability to every other node
// (GET /v1/health): each peer probed over the node network (ICMP and HTTP to the
// node IP) and over the pod network (HTTP to the peer's health address in its
// PodCIDR). docs/health.md says what is probed and how often.
type HealthMatrix struct {
	Node string `json:"node"`
	// Interval is the current probe interval (it grows with the number of peers).
	Interval string `json:"interval"`
	// Port is cluster-health-port, where every agent answers probes.
	Port int `json:"port"`
	// HealthIP is this node's own health address (its PodCIDR's first address).
	HealthIP string       `json:"healthIP"`
	Peers    []PeerHealth `json:"peers"`
}

// PeerHealth is one peer node's reachability, by path.
type PeerHealth struct {
	Name     string `json:"name"`
	NodeIP   string `json:"nodeIP"`
	HealthIP string `json:"healthIP,omitempty"` // "" when the peer has no PodCIDR yet
	// ICMP is an echo to the node IP; NodeHTTP a GET on the node IP's
	// cluster-health-port; PodHTTP the same on the peer's health address, through
	// the pod network (node routes or tunnel, and the uplink programs).
	ICMP     PathHealth `json:"icmp"`
	NodeHTTP PathHealth `json:"nodeHTTP"`
	PodHTTP  PathHealth `json:"podHTTP"`
}

// Path states.
const (
	PathUnknown = "unknown" // not probed yet
	PathOK      = "ok"
	PathFailing = "failing"
)

// PathHealth is one path's state: what the last probe found, since when the state
// holds, and the last failure (kept after recovery).
type PathHealth struct {
	State string `json:"state"`
	// Since is when the path entered State (the first probe for "unknown").
	Since time.Time `json:"since,omitzero"`
	// LatencySeconds is the last successful probe's round trip (ICMP) or
	// connect + request + answer time (HTTP).
	LatencySeconds float64   `json:"latencySeconds,omitempty"`
	LastProbe      time.Time `json:"lastProbe,omitzero"`
	LastFailure    time.Time `json:"lastFailure,omitzero"`
	LastError      string    `json:"lastError,omitempty"`
}

// ViaNode is the peer's state over the node network: ok only when both ICMP and
// HTTP to the node IP succeed, failing when either fails.
func (p PeerHealth) ViaNode() string { return worst(p.ICMP.State, p.NodeHTTP.State) }

// ViaPod is the peer's state over the pod network.
func (p PeerHealth) ViaPod() string { return p.PodHTTP.State }

// Reachable is true when every path to the peer is ok.
func (p PeerHealth) Reachable() bool { return p.ViaNode() == PathOK && p.ViaPod() == PathOK }

func worst(states ...string) string {
	out := PathOK
	for _, s := range states {
		switch {
		case s == PathFailing:
			return PathFailing
		case s != PathOK:
			out = PathUnknown
		}
	}
	return out
}

// HealthSummary is the health matrix at a glance, for GET /v1/status.
type HealthSummary struct {
	Peers     int `json:"peers"`
	Reachable int `json:"reachable"`
	// Failing names the peers with a failing path ("node-2 (pod network)").
	Failing []string `json:"failing,omitempty"`
}

// HealthMatrix returns the node's health matrix (GET /v1/health).
func (c *Client) HealthMatrix(ctx context.Context) (HealthMatrix, error) {
	var out HealthMatrix
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, &out)
	return out, err
}
