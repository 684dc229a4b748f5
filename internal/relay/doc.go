// Package relay is `myelin relay`: one Hubble Observer for the whole cluster. It finds
// the agents (the Kubernetes Node objects' InternalIP on the agents' Hubble port, or
// fixed --peer addresses), fans each GetFlows out to all of them and merges the
// streams in time order, and sums ServerStatus with the connected and unavailable
// nodes. A node that is down is reported (a node-status event in the flow stream, and
// in `hubble status`) and never holds up the others; a slow client loses flows
// (reported as lost events) rather than making the relay buffer without bound.
package relay
