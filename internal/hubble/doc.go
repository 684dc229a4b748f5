// Package hubble speaks the Hubble Observer gRPC API over myelin's flows: it converts a
// flow.Flow to the published flow protobuf (github.com/cilium/cilium/api/v1/flow),
// turns the FlowFilters a Hubble client sends into a flow.Request, and serves GetFlows,
// ServerStatus and GetNodes over any flow.Source (the agent's store on a node; the relay
// has its own merging server in internal/relay). The upstream hubble CLI is the client
// it is tested against.
package hubble
