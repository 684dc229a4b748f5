// Package flowclient is GET /v1/flows, both ends: the filter options of `myelin
// observe` and the query the agent parses (one parser for both, with errors that name
// the filter), ServeFlows (the agent's handler over its flow store), and
// NewAgentsSource, a flow.Source that merges several agents' flows by time (`myelin
// observe` across the lab, the service map).
package flowclient
