// Package flowmetrics is the node's flow metrics endpoint (hubble-metrics-server,
// :9965): Hubble's metric families (hubble_flows_processed_total, hubble_drop_total,
// hubble_tcp_flags_total, hubble_icmp_total, hubble_port_distribution_total,
// hubble_dns_queries_total, hubble_dns_responses_total) with Hubble's names and
// labels, counted by a flow.Sink as the agent's flow store takes each flow. Labels
// never carry a per-flow value (no addresses, pods or source ports): each label's set
// of values is bounded, and docs/metrics.md says by what.
package flowmetrics
