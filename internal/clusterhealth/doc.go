// Package clusterhealth is node-to-node health probing: every agent answers probes on
// cluster-health-port (its node IP and its health address, the first address of its
// PodCIDR) and probes every other node over the node network (ICMP echo and HTTP to
// the node IP) and over the pod network (HTTP to the peer's health address, from its
// own). The probe interval grows with the number of peers (Interval). The state of
// each path (Path) is a small pure state machine; the matrix (Matrix) is what
// GET /v1/health, `myelin health` and the metrics show. docs/health.md describes it.
package clusterhealth
