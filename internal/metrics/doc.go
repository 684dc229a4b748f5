// Package metrics is the agent's Prometheus endpoint (prometheus-serve-addr, :9962):
// the myelin_ metrics of the node's agent and datapath. Almost everything is read
// when Prometheus scrapes (Agent.Use hands it a function that returns a Snapshot):
// the datapath's per-CPU counters, map fills, endpoint and Service counts, the
// control loops' runs. Only what happens between scrapes and leaves no state
// behind (API sync latency, failed loads) is counted as it happens. docs/metrics.md
// lists every metric, its labels and their cardinality.
package metrics
