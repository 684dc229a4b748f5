// Package agent is myelin-agent's control loop: it resolves the configuration,
// decides the host-routing mode, loads and attaches the BPF datapath, adopts the
// endpoints a previous agent left, keeps node routes in step with the Node objects,
// installs the CNI plugin, and serves the local API. Run is the whole life of an agent;
// read it top to bottom to follow a node's start.
package agent
