package clusterhealth

import "github.com/myelin-net/myelin/internal/api"

// The metrics of the matrix, for the agent's Prometheus registry (internal/metrics):
// one series per peer and path, so the cardinality is (nodes − 1) × 3 per agent
// (2,997 at 1,000 nodes) for each of the two gauges.
const (
	// StatusMetric is 1 when the path to the peer is ok, 0 when failing; a path
	// not probed yet has no series.
	StatusMetric     = "myelin_node_connectivity_status"
	StatusMetricHelp = "1 when the last probe of the path to the peer node succeeded, 0 when it failed (path: icmp, node-http, pod-http)."
	// LatencyMetric is the last successful probe's latency in seconds.
	LatencyMetric     = "myelin_node_connectivity_latency_seconds"
	LatencyMetricHelp = "Latency of the last successful probe of the path to the peer node, in seconds (path: icmp, node-http, pod-http)."
)

// MetricLabels are the labels of both metrics: the peer node's name and the path.
var MetricLabels = []string{"peer", "path"}

// Sample is one series' value.
type Sample struct {
	Metric     string
	Peer, Path string
	Value      float64
}

// Samples are the series of the matrix's peers: the status of every probed path and
// the latency of every ok one.
func Samples(peers []api.PeerHealth) []Sample {
	var out []Sample
	for _, p := range peers {
		for _, path := range []struct {
			name string
			h    api.PathHealth
		}{{"icmp", p.ICMP}, {"node-http", p.NodeHTTP}, {"pod-http", p.PodHTTP}} {
			switch path.h.State {
			case api.PathOK:
				out = append(out, Sample{StatusMetric, p.Name, path.name, 1},
					Sample{LatencyMetric, p.Name, path.name, path.h.LatencySeconds})
			case api.PathFailing:
				out = append(out, Sample{StatusMetric, p.Name, path.name, 0})
			}
		}
	}
	return out
}
