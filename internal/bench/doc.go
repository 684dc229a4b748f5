// Package bench owns `myelin bench`: the model of a benchmark (Case, Environment,
// Workload, Placement), the load-generator runners and their output parsers (netperf
// TCP_RR, TCP_CRR and TCP_STREAM with service demand, iperf3 UDP loss at a fixed rate,
// /proc/stat CPU deltas), the baseline environments that need no lab (loopback in one
// network namespace, a bare veth pair between two), the lab stages (LabCases: myelin
// native and tunnel with BPF and legacy host routing, pods routed by the plain kernel and
// over hand-built kernel VXLAN, Flannel; each stage one lab brought up and down by a
// shared Cluster through `myelin lab`), the round-robin runner, the statistics (median,
// min–max, per-round ratio to a baseline) and the report (report.md, results.json, SVG
// charts).
//
// Decisions are kept apart from effects: Schedule, Summarize and the parsers are pure and
// unit-tested; Run applies them by starting processes in network namespaces. An
// Environment is anything that can give a client and a server on this machine (a netns
// pair, lab pods).
//
// Benchmarks are never timed tests: tests here check that runs complete and reports are
// whole, never a speed.
package bench
