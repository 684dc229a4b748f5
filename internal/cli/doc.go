// Package cli implements the operator commands of the myelin CLI that talk to agents
// (status, monitor): finding the agent sockets, calling the API, and rendering.
package cli
