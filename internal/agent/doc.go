// Package agent is myelin-agent: Run (run.go) is its table of contents. It reads the
// Node and the configuration and decides the node's modes once into a nodePlan
// (plan.go and plan_*.go, pure), loads and attaches the BPF datapath and restores the
// endpoints (datapath.go), serves the local API (server.go and its handlers: the
// endpoints and IPAM it owns, every other part through the view that part registers
// once it is ready, views.go and status.go), and supervises the control loops, each a
// type owning its state with a Run method: the datapath GC (gc.go), masquerade
// (masquerade.go), node routes (noderoutes.go) or tunnels (tunnels.go) following one
// Node informer (nodes.go), Services and their health checks (services.go), the
// apiserver's reachability (kubernetes.go), the firewall guard (guard.go), recorded
// CNI deletes (deleted.go) and the monitor fan-out (monitor.go). iptables rules live
// in internal/iptables.
package agent
