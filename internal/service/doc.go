// Package service turns Kubernetes Services and EndpointSlices into the datapath's
// load-balancing maps (kube-proxy replacement; docs/datapath.md, "Service load balancing").
//
// The decisions are pure and unit-tested: Desired computes a Service's frontends
// (ClusterIP:port, node IP:nodePort) and their backends from the API objects, and
// internal/maglev computes the consistent-hashing table every node derives identically. The
// Manager applies them to the datapath through a small interface, keeping stable ids
// (adopted from the pinned maps after a restart, so open flows keep their backend),
// quarantining freed ids while conntrack entries may name them, recording a backend
// that leaves one frontend while another keeps it (so the agent ends that frontend's
// flows to it), and never removing a frontend another Service has taken over. Watch drives the Manager from informers
// through a work queue, one Service at a time, so 10,000 Services never hold up the
// agent's other loops, and syncs every Service again periodically.
package service
